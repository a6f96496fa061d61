//! Dropping a wait cancels it; closing a notifier ends every wait; the lead
//! passes on when the fence that polls the fd goes away.
mod common;

use std::time::{Duration, Instant};

use common::{assert_no_leaks, runtime, start, Gpu, LIMIT};
use cudafd::{Error, Mechanism, Notifier};

#[test]
fn dropping_a_pending_wait_cancels_it() {
    let _serial = start();
    for mechanism in [Mechanism::Event, Mechanism::HostFunc, Mechanism::Spin] {
        let rt = runtime(2);
        rt.block_on(async {
            let gpu = Gpu::open();
            let stream = gpu.stream();
            let notifier = Notifier::new(mechanism).unwrap();
            stream.launch(1_500, false);
            // The timeout drops the future, and with it the fence.
            let r =
                tokio::time::timeout(Duration::from_millis(10), notifier.wait(stream.raw())).await;
            assert!(
                r.is_err(),
                "{mechanism:?}: a 1.5 s kernel finished within 10 ms"
            );
            assert_eq!(
                notifier.pending(),
                0,
                "{mechanism:?}: the dropped wait is still pending"
            );
            // The GPU work went on, and the stream still serves later waits.
            stream.launch(5, false);
            tokio::time::timeout(LIMIT, notifier.wait(stream.raw()))
                .await
                .expect("no hang")
                .unwrap();
            assert_eq!(notifier.pending(), 0);
        });
        drop(rt);
        // The detached wait's record lives until its kernel ends: then every count is zero.
        assert_no_leaks();
        assert_eq!(cudafd::stats().get("pending"), Some(0));
    }
}

#[test]
fn a_completion_queued_for_a_dropped_fence_is_discarded() {
    let _serial = start();
    let notifier = Notifier::new(Mechanism::Event).unwrap();
    let gpu = Gpu::open();
    let stream = gpu.stream();
    stream.launch(1, false);
    let fence = notifier.watch(stream.raw()).unwrap();
    stream.synchronize().unwrap();
    // Nothing drains here: wait until the completion is queued (the fd is readable).
    let fd = std::os::unix::io::AsRawFd::as_raw_fd(&notifier);
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    assert_eq!(
        unsafe { libc::poll(&mut p, 1, LIMIT.as_millis() as i32) },
        1
    );
    assert_eq!(notifier.pending(), 1);
    drop(fence);
    // Drained and dropped: nothing is reported, nothing is left.
    assert_eq!(notifier.dispatch().unwrap(), 1);
    assert_eq!(notifier.pending(), 0);
    assert_eq!(notifier.dispatch().unwrap(), 0);
    drop(notifier);
    assert_no_leaks();
}

#[test]
fn when_the_leading_fence_is_dropped_another_takes_over() {
    let _serial = start();
    let rt = runtime(2);
    rt.block_on(async {
        let gpu = Gpu::open();
        let (slow, quick) = (gpu.stream(), gpu.stream());
        let notifier = Notifier::new(Mechanism::Event).unwrap();
        slow.launch(2_000, false);
        let mut leader = notifier.watch(slow.raw()).unwrap();
        // Polled once (it takes the lead: it is the first), then kept, unpolled.
        assert!(tokio::time::timeout(Duration::from_millis(5), &mut leader)
            .await
            .is_err());
        quick.launch(20, false);
        let follower = tokio::spawn(tokio::time::timeout(LIMIT, notifier.wait(quick.raw())));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t = Instant::now();
        drop(leader); // the follower must now poll the fd itself
        follower
            .await
            .unwrap()
            .expect("the follower took over")
            .unwrap();
        assert!(
            t.elapsed() < Duration::from_millis(1_500),
            "the follower waited for the slow kernel"
        );
    });
    drop(rt);
    assert_no_leaks();
}

#[test]
fn closing_a_notifier_ends_its_waits() {
    let _serial = start();
    let rt = runtime(2);
    rt.block_on(async {
        let gpu = Gpu::open();
        let stream = gpu.stream();
        let notifier = Notifier::new(Mechanism::Event).unwrap();
        stream.launch(2_000, false);
        let waits: Vec<_> = (0..4)
            .map(|_| tokio::spawn(notifier.wait(stream.raw())))
            .collect();
        tokio::time::sleep(Duration::from_millis(10)).await;
        notifier.close().unwrap();
        for w in waits {
            let r = tokio::time::timeout(LIMIT, w)
                .await
                .expect("no hang")
                .unwrap();
            assert!(matches!(r, Err(Error::Closed)), "{r:?}");
        }
        assert!(matches!(notifier.watch(stream.raw()), Err(Error::Closed)));
        notifier.close().unwrap(); // idempotent
    });
    drop(rt);
    assert_no_leaks();
}

#[test]
fn bad_handles_give_errors() {
    let _serial = start();
    let notifier = Notifier::new(Mechanism::Event).unwrap();
    if !common::real() {
        // The simulator checks handles (the real driver's behaviour is undefined).
        let err = notifier.watch(0x1234_5678 as cudafd::CUstream).unwrap_err();
        assert_eq!(err.cuda(), Some(cudafd::CudaError::INVALID_HANDLE), "{err}");
        assert_eq!(err.call(), Some("cudafd_watch_stream"));
        assert!(
            err.to_string().contains("CUDA_ERROR_INVALID_HANDLE"),
            "{err}"
        );
    }
    assert!(cudafd::set_driver(std::path::Path::new("/nonexistent/libcuda.so")).is_err());
    drop(notifier);
    assert_no_leaks();
}

#[test]
fn a_notifier_outlives_its_runtime() {
    let _serial = start();
    let gpu = Gpu::open();
    let stream = gpu.stream();
    let rt = runtime(2);
    let (notifier, mut fence) = rt.block_on(async {
        let notifier = Notifier::new(Mechanism::Event).unwrap();
        stream.launch(100, false);
        let fence = notifier.watch(stream.raw()).unwrap();
        (notifier, fence)
    });
    assert!(notifier.has_reactor());
    drop(rt); // its reactor is gone; a blocking wait still works, and so does the drop
    fence.wait(Some(LIMIT)).unwrap();
    stream.launch(5, false);
    notifier
        .watch(stream.raw())
        .unwrap()
        .wait(Some(LIMIT))
        .unwrap();
    drop((fence, notifier));
    assert_no_leaks();
}

#[test]
fn waits_cancelled_at_random_never_hold_up_the_others() {
    let _serial = start();
    let rt = runtime(4);
    rt.block_on(async {
        let gpu = std::sync::Arc::new(Gpu::open());
        let streams: std::sync::Arc<Vec<_>> =
            std::sync::Arc::new((0..6).map(|_| gpu.stream()).collect());
        let notifier = Notifier::new(Mechanism::Event).unwrap();
        let mut tasks = Vec::new();
        for i in 0..120usize {
            let (streams, notifier) = (streams.clone(), notifier.clone());
            tasks.push(tokio::spawn(async move {
                let stream = &streams[i % streams.len()];
                for round in 0..5usize {
                    stream.launch(1 + ((i + round) % 4) as u64, false);
                    // Every third wait is given up at once or soon: the lead, when it
                    // has it, must pass on to a fence still waiting.
                    let wait = notifier.wait(stream.raw());
                    match (i + round) % 3 {
                        0 => drop(wait),
                        1 => {
                            let _ = tokio::time::timeout(Duration::from_micros(300), wait).await;
                        }
                        _ => tokio::time::timeout(LIMIT, wait)
                            .await
                            .expect("no hang")
                            .unwrap(),
                    }
                }
                // A last wait that must finish.
                let wait = notifier.wait(stream.raw());
                tokio::time::timeout(LIMIT, wait)
                    .await
                    .expect("no hang")
                    .unwrap();
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
fn closing_a_notifier_ends_blocking_waits() {
    let _serial = start();
    let gpu = Gpu::open();
    let stream = gpu.stream();
    let notifier = Notifier::new(Mechanism::Event).unwrap();
    stream.launch(2_000, false);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let mut fence = notifier.watch(stream.raw()).unwrap();
            std::thread::spawn(move || fence.wait(Some(LIMIT)))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    notifier.close().unwrap();
    for th in threads {
        let r = th.join().unwrap();
        assert!(matches!(r, Err(Error::Closed)), "{r:?}");
    }
    assert!(
        t.elapsed() < Duration::from_millis(1_500),
        "the 2 s kernel ended first"
    );
    drop(notifier);
    assert_no_leaks();
}
