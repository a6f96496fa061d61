//! A `spin` notifier's lone `Notifier::wait` (the asking fence) is asked
//! about by its own task; a later wait on its stream is held until the
//! asking fence's outcome is known. A held fence still finishes however it
//! is waited for, whether or not the asking fence's future is polled.
mod common;

use std::os::unix::io::AsRawFd;
use std::time::{Duration, Instant};

use common::{assert_no_leaks, executor, start, Gpu, LIMIT};
use cudafd::{CudaError, Error, Mechanism, Notifier};

/// Shorter than the core's backstop of the asking fence's wait (10 s with
/// a max_lateness of 10 s): a held fence that finished within it did not
/// wait for the backstop.
const BEFORE_BACKSTOP: Duration = Duration::from_secs(5);

#[test]
fn a_held_fence_finishes_in_a_poll_loop_and_a_blocking_wait() {
    let _serial = start();
    // Made outside a runtime: no reactor; nothing polls the asking fence's
    // future until the held fence has finished.
    let notifier = Notifier::new(Mechanism::Spin).unwrap();
    notifier.set_max_lateness(Duration::from_secs(10)).unwrap();
    let gpu = Gpu::open();
    let stream = gpu.stream();
    for blocking in [false, true] {
        stream.launch(20, false);
        let asking = notifier.wait(stream.raw());
        let mut held = notifier.watch(stream.raw()).unwrap();
        let t0 = Instant::now();
        let r = if blocking {
            held.wait(Some(BEFORE_BACKSTOP))
        } else {
            // The poll(2) loop of the crate's documentation.
            loop {
                let left = BEFORE_BACKSTOP.saturating_sub(t0.elapsed());
                assert!(!left.is_zero(), "the fd never told the held fence");
                let mut p = libc::pollfd {
                    fd: held.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                if unsafe { libc::poll(&mut p, 1, left.as_millis() as libc::c_int + 1) } == 1 {
                    if let Some(r) = held.try_wait() {
                        break r;
                    }
                }
            }
        };
        assert!(matches!(r, Ok(())), "blocking: {blocking}: {r:?}");
        assert!(t0.elapsed() < BEFORE_BACKSTOP, "blocking: {blocking}");
        // The asking fence's outcome, found for the held one, is its own.
        executor().block_on(async {
            tokio::time::timeout(LIMIT, asking)
                .await
                .expect("no hang")
                .unwrap();
        });
        assert_eq!(notifier.pending(), 0);
    }
    drop((stream, notifier));
    assert_no_leaks();
}

/// The test that faults the device, which only the simulator survives.
const SIM_ONLY: &str = "a_held_fence_takes_the_lead_when_the_leader_leaves";

#[test]
fn a_held_fence_takes_the_lead_when_the_leader_leaves() {
    // On a GPU a fault ends the process's use of the device; on the
    // simulator a context made after it is healthy: simulator only.
    assert!(
        !common::real(),
        "simulator only: on a GPU, run with --skip {SIM_ONLY} (rust/device-test.sh does)"
    );
    let _serial = start();
    let faults = || cudafd::stats().get("faults").expect("a fault count");
    // A current-thread runtime: only this task runs while it does not yield,
    // and the others then run in the order they were woken.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let notifier = Notifier::new(Mechanism::Spin).unwrap();
        notifier.set_max_lateness(Duration::from_secs(10)).unwrap();
        let gpu = Gpu::open();
        let (stream, long, faulting) = (gpu.stream(), gpu.stream(), gpu.stream());
        stream.launch(10, false);
        let asking = notifier.wait(stream.raw()); // never polled until the end
        long.launch(LIMIT.as_millis() as u64, false); // ended by the fault
        let leader = tokio::spawn(notifier.wait(long.raw()));
        let held = notifier.wait(stream.raw());
        // `leader` is polled and takes the lead.
        tokio::task::yield_now().await;
        // The held fence's completion is drained (here or by the leader),
        // leaving the asking fence's wait (backed up 10 s away) and the
        // leader's...
        stream.synchronize().unwrap();
        let t0 = Instant::now();
        while notifier.pending() > 2 {
            assert!(t0.elapsed() < LIMIT, "the held fence's wait never ended");
            notifier.dispatch().unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        // ...then a fault queues both: the poller finds the leader's wait
        // failed, and the fault ends the context's other waits.
        let before = faults();
        faulting.launch(1, true);
        while faults() < before + 2 {
            assert!(t0.elapsed() < LIMIT, "the fault never reached the waits");
            std::thread::sleep(Duration::from_millis(1));
        }
        // The held fence, polled first, finds the asking fence's wait queued
        // (not to be asked about) and the lead taken; then the leader is
        // dropped without draining, and the fd is left to the held fence.
        let held = tokio::spawn(held);
        leader.abort();
        let r = tokio::time::timeout(LIMIT, held).await;
        assert!(
            matches!(r, Ok(Ok(Ok(())))),
            "the held fence did not finish: {r:?}"
        );
        let r = tokio::time::timeout(LIMIT, asking).await.expect("no hang");
        assert!(
            matches!(r, Err(Error::Gpu(CudaError::ILLEGAL_ADDRESS))),
            "{r:?}"
        );
        assert_eq!(notifier.pending(), 0);
        for s in [&stream, &long, &faulting] {
            assert!(s.synchronize().is_err());
        }
    });
    drop(rt);
    assert_no_leaks();
}
