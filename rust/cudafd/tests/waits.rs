//! Waits complete, in order, never before their work, however they are awaited.
mod common;

use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{assert_no_leaks, executor, runtime, start, Gpu, LIMIT};
use cudafd::{Mechanism, Notifier};

const MECHANISMS: [Mechanism; 3] = [Mechanism::Event, Mechanism::HostFunc, Mechanism::Spin];

#[test]
fn waits_on_one_stream_complete_in_order_and_not_early() {
    let _serial = start();
    for mechanism in MECHANISMS {
        let rt = runtime(2);
        rt.block_on(async {
            let gpu = Gpu::open();
            let stream = gpu.stream();
            let notifier = Notifier::new(mechanism).unwrap();
            assert!(notifier.has_reactor());
            // Each point is watched twice: `awaited[i]` by task i, `seen[i]` right
            // after it. When task i's fence is done, every earlier watch on the
            // stream (seen[0..i]) must be done too: it was queued before.
            let lengths = [30u64, 2, 15, 1, 8, 20];
            let seen = Arc::new(Mutex::new(Vec::new()));
            let start = Instant::now();
            let mut tasks = Vec::new();
            let mut end_ms = 0;
            for (i, ms) in lengths.iter().enumerate() {
                stream.launch(*ms, false);
                end_ms += ms;
                let fence = notifier.watch(stream.raw()).unwrap();
                seen.lock()
                    .unwrap()
                    .push(notifier.watch(stream.raw()).unwrap());
                let seen = seen.clone();
                tasks.push(tokio::spawn(async move {
                    tokio::time::timeout(LIMIT, fence)
                        .await
                        .expect("no hang")
                        .unwrap();
                    let took = start.elapsed();
                    for (j, earlier) in seen.lock().unwrap()[..i].iter_mut().enumerate() {
                        assert!(
                            matches!(earlier.try_wait(), Some(Ok(()))),
                            "point {i} done before point {j}"
                        );
                    }
                    (took, end_ms)
                }));
            }
            for t in tasks {
                let (took, end_ms) = t.await.unwrap();
                assert!(
                    took >= Duration::from_millis(end_ms),
                    "{mechanism:?}: done after {took:?}, its work takes {end_ms} ms"
                );
            }
            for f in seen.lock().unwrap().iter_mut() {
                f.wait(Some(LIMIT)).unwrap();
            }
            assert_eq!(notifier.pending(), 0);
        });
    }
    assert_no_leaks();
}

#[test]
fn many_tasks_on_a_multi_threaded_runtime_share_one_notifier() {
    let _serial = start();
    let rt = runtime(4);
    rt.block_on(async {
        let gpu = Arc::new(Gpu::open());
        let streams: Arc<Vec<_>> = Arc::new((0..8).map(|_| gpu.stream()).collect());
        let notifier = Notifier::new(Mechanism::Event).unwrap();
        let mut tasks = Vec::new();
        for i in 0..400usize {
            let (streams, notifier) = (streams.clone(), notifier.clone());
            tasks.push(tokio::spawn(async move {
                // Tasks hop between worker threads between their awaits.
                for round in 0..3 {
                    let stream = &streams[(i + round) % streams.len()];
                    let start = Instant::now();
                    let ms = 1 + (i % 3) as u64;
                    stream.launch(ms, false);
                    // A binding of its own: before Rust 1.64 the raw stream
                    // handle in the awaited expression would make the task !Send.
                    let wait = notifier.wait(stream.raw());
                    tokio::time::timeout(LIMIT, wait)
                        .await
                        .expect("no hang")
                        .unwrap();
                    assert!(start.elapsed() >= Duration::from_millis(ms));
                    tokio::task::yield_now().await;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(notifier.pending(), 0);
    });
    drop(rt);
    assert_no_leaks();
}

#[test]
fn blocking_waits_and_tasks_share_one_notifier() {
    let _serial = start();
    let rt = runtime(2);
    rt.block_on(async {
        let gpu = Arc::new(Gpu::open());
        let notifier = Notifier::new(Mechanism::Event).unwrap();
        let mut tasks = Vec::new();
        for i in 0..16u64 {
            let (gpu, notifier) = (gpu.clone(), notifier.clone());
            let blocking = i % 2 == 0;
            let work = move || {
                let stream = gpu.stream();
                stream.launch(5 + i, false);
                let fence = notifier.watch(stream.raw()).unwrap();
                (stream, fence)
            };
            if blocking {
                tasks.push(tokio::task::spawn_blocking(move || {
                    let (_stream, mut fence) = work();
                    fence.wait(Some(LIMIT)).unwrap();
                    assert!(fence.is_finished());
                }));
            } else {
                tasks.push(tokio::spawn(async move {
                    let (_stream, fence) = work();
                    tokio::time::timeout(LIMIT, fence)
                        .await
                        .expect("no hang")
                        .unwrap();
                }));
            }
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    drop(rt);
    assert_no_leaks();
}

#[test]
fn without_a_runtime_a_poll_loop_drives_the_fences() {
    let _serial = start();
    // Created outside any runtime: no reactor; this thread's poll(2) loop dispatches.
    let notifier = Notifier::new(Mechanism::Event).unwrap();
    assert!(!notifier.has_reactor());
    let gpu = Gpu::open();
    let (a, b) = (gpu.stream(), gpu.stream());
    a.launch(1_000, false);
    b.launch(5, false);
    let mut fa = notifier.watch(a.raw()).unwrap();
    let mut fb = notifier.watch(b.raw()).unwrap();
    assert!(fa.try_wait().is_none() && fb.try_wait().is_none());
    let deadline = Instant::now() + LIMIT;
    let mut finished = Vec::new();
    while finished.len() < 2 {
        assert!(Instant::now() < deadline, "no completion");
        let mut p = libc::pollfd {
            fd: fa.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        assert!(unsafe { libc::poll(&mut p, 1, 1000) } >= 0);
        for (name, f) in [("a", &mut fa), ("b", &mut fb)] {
            if !f.is_finished() {
                if let Some(r) = f.try_wait() {
                    r.unwrap();
                    finished.push(name);
                }
            }
        }
    }
    // b's 5 ms kernel ran beside a's 1 s one on another stream.
    assert_eq!(finished, ["b", "a"]);
    // Drained to empty: the fd is clear.
    let mut p = libc::pollfd {
        fd: notifier.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 0);
    drop((fa, fb, notifier));
    assert_no_leaks();
}

#[test]
fn without_tokio_a_dispatch_thread_completes_awaited_fences() {
    let _serial = start();
    let notifier = Notifier::new(Mechanism::Spin).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let (n, stop) = (notifier.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let mut p = libc::pollfd {
                    fd: n.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                unsafe { libc::poll(&mut p, 1, 20) };
                n.dispatch().unwrap();
            }
        })
    };
    let gpu = Gpu::open();
    let streams: Vec<_> = (0..4).map(|_| gpu.stream()).collect();
    // A current-thread runtime only as an executor: the notifier has no reactor.
    let rt = executor();
    rt.block_on(async {
        let mut fences = Vec::new();
        for (i, s) in streams.iter().enumerate() {
            s.launch(3 * i as u64 + 1, false);
            fences.push(notifier.wait(s.raw()));
        }
        for f in fences {
            tokio::time::timeout(LIMIT, f)
                .await
                .expect("no hang")
                .unwrap();
        }
    });
    stop.store(true, Ordering::Release);
    driver.join().unwrap();
    drop((streams, notifier));
    assert_no_leaks();
}

#[test]
fn a_blocking_wait_times_out_and_stays_pending() {
    let _serial = start();
    let notifier = Notifier::new(Mechanism::Event).unwrap();
    let gpu = Gpu::open();
    let stream = gpu.stream();
    let t = Instant::now();
    stream.launch(1_500, false);
    let mut fence = notifier.watch(stream.raw()).unwrap();
    assert!(matches!(
        fence.wait(Some(Duration::from_millis(20))),
        Err(cudafd::Error::Timeout)
    ));
    assert!(t.elapsed() >= Duration::from_millis(20));
    assert!(!fence.is_finished());
    assert_eq!(notifier.pending(), 1);
    fence.wait(Some(LIMIT)).unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(1_500),
        "done after {:?}",
        t.elapsed()
    );
    // The outcome stays: a second wait returns it again at once.
    fence.wait(Some(Duration::ZERO)).unwrap();
    drop((fence, notifier));
    assert_no_leaks();
}

#[test]
fn a_blocking_wait_drains_at_its_deadline_and_a_huge_timeout_is_no_limit() {
    let _serial = start();
    let notifier = Notifier::new(Mechanism::Event).unwrap();
    let gpu = Gpu::open();
    let stream = gpu.stream();
    stream.launch(1, false);
    let mut fence = notifier.watch(stream.raw()).unwrap();
    // Its completion queued, not drained (the fd readable): a zero timeout finds it.
    let mut p = libc::pollfd {
        fd: notifier.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    assert_eq!(
        unsafe { libc::poll(&mut p, 1, LIMIT.as_millis() as i32) },
        1
    );
    assert!(matches!(fence.wait(Some(Duration::ZERO)), Ok(())));
    // A timeout past what Instant can count waits for the work, as None does.
    let t = Instant::now();
    stream.launch(30, false);
    let mut later = notifier.watch(stream.raw()).unwrap();
    assert!(matches!(later.wait(Some(Duration::MAX)), Ok(())));
    assert!(t.elapsed() >= Duration::from_millis(30));
    drop((fence, later, notifier, stream, gpu));
    assert_no_leaks();
}

#[test]
fn a_leak_check_with_a_huge_timeout_has_no_limit() {
    let _serial = start();
    let notifier = Notifier::new(Mechanism::Event).unwrap();
    let gpu = Gpu::open();
    let stream = gpu.stream();
    stream.launch(1, false);
    let mut fence = notifier.watch(stream.raw()).unwrap();
    fence.wait(Some(LIMIT)).unwrap();
    drop((fence, notifier, stream, gpu));
    assert_no_leaks();
    // Every count is zero already: it returns at once.
    let s = cudafd::stats::wait_for_zero(Duration::MAX).expect("every live count at zero");
    assert!(s.live().is_empty(), "{:?}", s.live());
}

#[cfg(feature = "tokio")]
#[test]
fn a_notifier_made_in_a_runtime_without_io_is_an_error() {
    let _serial = start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let made = rt.block_on(async { Notifier::new(Mechanism::Event) });
    match made {
        Err(cudafd::Error::Io(e)) => assert!(e.to_string().contains("enable_io"), "{e}"),
        other => panic!("expected an Io error, got {other:?}"),
    }
    drop(rt);
    assert_no_leaks();
}

#[test]
fn max_lateness_is_checked_and_a_lazy_notifier_still_completes() {
    let _serial = start();
    let rt = runtime(2);
    rt.block_on(async {
        let gpu = Gpu::open();
        let stream = gpu.stream();
        let notifier = Notifier::new(Mechanism::Event).unwrap();
        assert!(notifier.set_max_lateness(Duration::from_nanos(10)).is_err());
        assert!(notifier.set_max_lateness(Duration::from_secs(11)).is_err());
        notifier
            .set_max_lateness(Duration::from_millis(20))
            .unwrap();
        stream.launch(30, false);
        let fence = notifier.watch(stream.raw()).unwrap();
        tokio::time::timeout(LIMIT, fence).await.unwrap().unwrap();
    });
    assert_no_leaks();
}

#[test]
fn a_young_fence_asks_the_driver_itself() {
    let _serial = start();
    // Created outside a runtime: no reactor, and nothing here dispatches, so
    // the fence can only learn the end by asking. The poller's first ask
    // would come 2.5 s after the watch (a quarter of max_lateness).
    let notifier = Notifier::new(Mechanism::Event).unwrap();
    notifier.set_max_lateness(Duration::from_secs(10)).unwrap();
    let gpu = Gpu::open();
    let stream = gpu.stream();
    stream.launch(0, false);
    let fence = notifier.watch(stream.raw()).unwrap();
    stream.synchronize().unwrap(); // over by the fence's first poll
    let rt = executor();
    rt.block_on(async {
        tokio::time::timeout(LIMIT, fence)
            .await
            .expect("found by the fence's own ask")
            .unwrap();
    });
    // The ask took the wait from the core: nothing pending, nothing queued.
    assert_eq!(notifier.pending(), 0);
    let mut p = libc::pollfd {
        fd: notifier.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    assert_eq!(unsafe { libc::poll(&mut p, 1, 0) }, 0);
    drop((stream, notifier));
    assert_no_leaks();
}

#[test]
fn a_lone_spin_wait_asks_while_it_runs_and_the_poller_only_backs_it_up() {
    let _serial = start();
    // Made outside a runtime: no reactor, and nothing here dispatches, so a
    // wait the poller leaves to its fence's asks (backing it up every
    // max(max_lateness, 10 ms) = 10 s) ends only by those asks.
    let notifier = Notifier::new(Mechanism::Spin).unwrap();
    notifier.set_max_lateness(Duration::from_secs(10)).unwrap();
    let gpu = Gpu::open();
    let stream = gpu.stream();
    let queries = || cudafd::stats().get("queries").expect("a query count");
    // A watch() may be waited for by blocking or through the fd: spun on.
    stream.launch(150, false);
    let before = queries();
    let watched = notifier.watch(stream.raw()).unwrap();
    stream.synchronize().unwrap();
    let spun = queries() - before;
    drop(watched);
    notifier.dispatch().unwrap(); // its completion, queued meanwhile, is discarded
                                  // A lone wait() is awaited: its fence asks, however long its work runs.
    let t0 = Instant::now();
    stream.launch(300, false);
    let before = queries();
    let wait = notifier.wait(stream.raw());
    std::thread::sleep(Duration::from_millis(150)); // not polled yet
    let asked = queries() - before;
    executor().block_on(async {
        tokio::time::timeout(LIMIT, wait)
            .await
            .expect("found by the fence's own asks")
            .unwrap();
    });
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "done before its work"
    );
    assert!(
        asked < 20,
        "{asked} queries: the poller spun on a wait left to its fence"
    );
    assert!(
        spun > 5 * (asked + 1),
        "spun on: {spun} queries, left to the fence: {asked}"
    );
    assert_eq!(notifier.pending(), 0);
    // The next watch, a watch() again, is spun on: the setting follows each watch.
    stream.launch(100, false);
    let before = queries();
    let mut fence = notifier.watch(stream.raw()).unwrap();
    stream.synchronize().unwrap();
    assert!(
        queries() - before > 5 * (asked + 1),
        "a watch() after a wait() was not spun on"
    );
    assert!(matches!(fence.wait(Some(LIMIT)), Ok(())));
    drop((fence, stream, notifier));
    assert_no_leaks();
}

#[test]
fn a_wait_on_the_stream_of_a_lone_spin_wait_does_not_finish_before_it() {
    let _serial = start();
    // The lone wait() (`first`) is left to its fence's asks, in a lane of
    // its own; a watch() after it on its stream (`second`) is spun on by the
    // poller, which finds it over as soon as the stream is idle. `second`
    // finishes only once `first`'s outcome is known: its try_wait asks about
    // `first`'s wait (over, as its work came before `second`'s), which is
    // then taken from the core. A watch on another stream (`other`) is not
    // held.
    let notifier = Notifier::new(Mechanism::Spin).unwrap();
    notifier.set_max_lateness(Duration::from_secs(10)).unwrap();
    let gpu = Gpu::open();
    let (stream, another) = (gpu.stream(), gpu.stream());
    for dropped in [false, true] {
        stream.launch(50, false);
        let first = notifier.wait(stream.raw());
        let mut second = notifier.watch(stream.raw()).unwrap();
        another.launch(1, false);
        let mut other = notifier.watch(another.raw()).unwrap();
        stream.synchronize().unwrap();
        another.synchronize().unwrap();
        let deadline = Instant::now() + LIMIT;
        while notifier.pending() > 1 {
            // until both are queued by the poller and drained (`first` is
            // only backed up, 10 s away)
            assert!(Instant::now() < deadline, "the poller never found them");
            notifier.dispatch().unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            matches!(other.try_wait(), Some(Ok(()))),
            "a wait on another stream was held"
        );
        assert_eq!(notifier.pending(), 1, "`first` was asked about");
        // Dropped: its wait detached, nothing holds the later one.
        let first = if dropped { None } else { Some(first) };
        assert!(
            matches!(second.try_wait(), Some(Ok(()))),
            "the later wait did not finish"
        );
        assert_eq!(
            notifier.pending(),
            0,
            "finished before the earlier wait on its stream"
        );
        if let Some(first) = first {
            executor().block_on(async {
                tokio::time::timeout(LIMIT, first).await.unwrap().unwrap();
            });
        }
    }
    assert_eq!(notifier.pending(), 0);
    drop((stream, another, notifier));
    assert_no_leaks();
}

#[test]
fn an_asking_fence_lets_the_runtime_poll_its_reactor_at_every_pass() {
    let _serial = start();
    // A lone spin wait's task is always ready while it asks. Each of its
    // polls yields as `yield_now` does, so the runtime polls its reactor
    // before polling it again: another task's fd event is seen within a
    // pass or two, not after the dozens of polls a current-thread runtime
    // makes between two looks at its reactor while a task is always ready.
    // Counted in the asking task's polls, not timed.
    struct Counted<F>(std::pin::Pin<Box<F>>, Arc<AtomicUsize>);
    impl<F: std::future::Future> std::future::Future for Counted<F> {
        type Output = F::Output;
        fn poll(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<F::Output> {
            self.1.fetch_add(1, Ordering::SeqCst);
            self.0.as_mut().poll(cx)
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let notifier = Notifier::new(Mechanism::Spin).unwrap();
        let gpu = Gpu::open();
        let stream = gpu.stream();
        let t0 = Instant::now(); // before the launch: the work may start at once
        stream.launch(2000, false);
        let polls = Arc::new(AtomicUsize::new(0));
        let asking = tokio::spawn(Counted(
            Box::pin(notifier.wait(stream.raw())),
            polls.clone(),
        ));
        let (tx, rx) = tokio::net::UnixStream::pair().unwrap();
        let mut most = 0;
        for _ in 0..20 {
            let before = polls.load(Ordering::SeqCst);
            while polls.load(Ordering::SeqCst) < before + 3 {
                tokio::task::yield_now().await; // the asking task runs meanwhile
            }
            let before = polls.load(Ordering::SeqCst);
            assert_eq!(tx.try_write(b"x").unwrap(), 1);
            rx.readable().await.unwrap();
            let mut byte = [0u8; 1];
            assert_eq!(rx.try_read(&mut byte).unwrap(), 1);
            most = most.max(polls.load(Ordering::SeqCst) - before);
        }
        assert!(
            !asking.is_finished(),
            "the kernel ended before the checks did"
        );
        assert!(
            most <= 6,
            "the asking task was polled {most} times before an fd event was seen"
        );
        tokio::time::timeout(LIMIT, asking)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(
            t0.elapsed() >= Duration::from_millis(2000),
            "done before its work"
        );
        drop((stream, notifier));
    });
    drop(rt);
    assert_no_leaks();
}

#[test]
fn a_fence_watched_beside_another_leaves_its_wait_to_the_fd() {
    let _serial = start();
    // As above, but another fence of the notifier is alive at the watch: the
    // new fence does not ask, so with no reactor, no dispatch and the
    // poller's first ask 2.5 s away it stays pending although its work is over.
    let notifier = Notifier::new(Mechanism::Event).unwrap();
    notifier.set_max_lateness(Duration::from_secs(10)).unwrap();
    let gpu = Gpu::open();
    let (busy, stream) = (gpu.stream(), gpu.stream());
    busy.launch(1, false);
    let other = notifier.watch(busy.raw()).unwrap();
    stream.launch(0, false);
    let mut fence = notifier.watch(stream.raw()).unwrap();
    stream.synchronize().unwrap();
    let rt = executor();
    rt.block_on(async {
        let polled = tokio::time::timeout(Duration::from_millis(50), &mut fence).await;
        assert!(polled.is_err(), "the fence asked the driver: {polled:?}");
    });
    assert_eq!(notifier.pending(), 2);
    drop((fence, other, busy, stream, notifier));
    assert_no_leaks();
}

#[test]
fn a_fence_waited_for_then_awaited_returns_its_outcome() {
    let _serial = start();
    let notifier = Notifier::new(Mechanism::Event).unwrap();
    let gpu = Gpu::open();
    let stream = gpu.stream();
    stream.launch(1, false);
    let mut fence = notifier.watch(stream.raw()).unwrap();
    fence.wait(Some(LIMIT)).unwrap(); // finished by blocking, never polled
    let rt = executor();
    rt.block_on(async {
        // Polling a finished fence returns the same outcome, at once.
        tokio::time::timeout(LIMIT, &mut fence)
            .await
            .expect("a finished fence is ready")
            .unwrap();
        tokio::time::timeout(LIMIT, &mut fence)
            .await
            .expect("and stays ready")
            .unwrap();
    });
    drop((fence, stream, notifier));
    assert_no_leaks();
}
