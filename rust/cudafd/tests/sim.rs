//! The simulator as a test device: a fault ends every context alive, as on
//! a GPU, a fault's code reaches the wait, and cudafd leaves no streams or
//! events behind.
use std::sync::Mutex;
use std::time::Duration;

use cudafd::{sim, CudaError, Error, Mechanism, Notifier};

static SERIAL: Mutex<()> = Mutex::new(());
const LIMIT: Duration = Duration::from_secs(20);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_fault_ends_every_context_and_keeps_its_code() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let sim = sim::load().unwrap();
    assert!(sim.path().ends_with("libcudafd_sim.so"));
    assert_eq!(cudafd::driver_path(), sim.path().to_str().unwrap());
    let before = sim.stats();
    rt().block_on(async {
        let (bad, other) = (sim.context(0).unwrap(), sim.context(1).unwrap());
        let (bad_stream, other_stream) = (bad.stream().unwrap(), other.stream().unwrap());
        let notifier = Notifier::new(Mechanism::Event).unwrap();
        other_stream.launch(Duration::from_secs(5)).unwrap(); // only the fault can end it early
        bad_stream
            .launch_fault(Duration::from_millis(10), CudaError::LAUNCH_FAILED)
            .unwrap();
        let (b, o) = tokio::join!(
            tokio::time::timeout(LIMIT, notifier.wait(bad_stream.as_raw())),
            tokio::time::timeout(LIMIT, notifier.wait(other_stream.as_raw())),
        );
        for (what, r) in [("the faulting context", b), ("the other device's", o)] {
            match r.expect("no hang") {
                Err(Error::Gpu(e)) => {
                    assert_eq!(e.code(), 719, "{what}");
                    assert_eq!(e.name(), "CUDA_ERROR_LAUNCH_FAILED");
                }
                other => panic!("{what}: {other:?}"),
            }
        }
        assert_eq!(bad.fault().unwrap(), Some(CudaError::LAUNCH_FAILED));
        assert_eq!(other.fault().unwrap(), Some(CudaError::LAUNCH_FAILED));
        assert!(bad_stream.synchronize().is_err());
        assert!(other_stream.synchronize().is_err());
        // A context made after the fault is healthy.
        let fresh = sim.context(1).unwrap();
        let fresh_stream = fresh.stream().unwrap();
        fresh_stream.launch(Duration::from_millis(10)).unwrap();
        tokio::time::timeout(LIMIT, notifier.wait(fresh_stream.as_raw()))
            .await
            .expect("no hang")
            .expect("a context made after the fault");
    });
    if let Err(s) = cudafd::stats::wait_for_zero(Duration::from_secs(10)) {
        panic!("live counts not back to zero: {:?}", s.live());
    }
    let after = sim.stats();
    assert_eq!(
        (after.contexts, after.streams, after.events),
        (before.contexts, before.streams, before.events)
    );
    assert!(after.kernels_run >= before.kernels_run + 2);
}

#[test]
fn a_watch_after_the_notifier_outlives_its_handle() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let sim = sim::load().unwrap();
    let ctx = sim.context(0).unwrap();
    let stream = ctx.stream().unwrap();
    stream.launch(Duration::from_millis(20)).unwrap();
    // The fence keeps the notifier alive after its last handle is dropped.
    let mut fence = Notifier::new(Mechanism::Event)
        .unwrap()
        .watch(stream.as_raw())
        .unwrap();
    assert_eq!(cudafd::stats().get("notifiers"), Some(1));
    fence.wait(Some(LIMIT)).unwrap();
    drop(fence);
    assert_eq!(cudafd::stats().get("notifiers"), Some(0));
}

#[test]
fn load_is_idempotent_and_refuses_another_library() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let sim = sim::load().unwrap();
    assert!(std::ptr::eq(sim, sim::load_from(sim.path()).unwrap()));
    let err = sim::load_from(std::path::Path::new("/nonexistent/libcudafd_sim.so")).unwrap_err();
    assert!(err.to_string().contains("loaded from"), "{err}");
    // libcudafd keeps the simulator as its driver.
    assert!(cudafd::set_driver(std::path::Path::new("/nonexistent/libcuda.so.1")).is_err());
    assert!(cudafd::driver_version().unwrap() >= 12000);
}

#[test]
fn a_young_fence_asking_finds_a_fault() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let sim = sim::load().unwrap();
    let ctx = sim.context(0).unwrap();
    let stream = ctx.stream().unwrap();
    // No reactor and no dispatch; the poller would not ask for 2.5 s.
    let notifier = Notifier::new(Mechanism::Event).unwrap();
    notifier.set_max_lateness(Duration::from_secs(10)).unwrap();
    // Long enough that the watch comes before the fault on a loaded machine
    // (a watch in a context that faulted already fails at once).
    stream
        .launch_fault(Duration::from_millis(50), CudaError::ILLEGAL_ADDRESS)
        .unwrap();
    let fence = notifier.watch(stream.as_raw()).unwrap();
    assert!(stream.synchronize().is_err()); // faulted before the fence's first poll
    let r = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(async { tokio::time::timeout(LIMIT, fence).await })
        .expect("found by the fence's own ask");
    match r {
        Err(Error::Gpu(e)) => assert_eq!(e, CudaError::ILLEGAL_ADDRESS),
        other => panic!("{other:?}"),
    }
    assert_eq!(notifier.pending(), 0);
    drop((stream, ctx, notifier));
    if let Err(s) = cudafd::stats::wait_for_zero(Duration::from_secs(10)) {
        panic!("live counts not back to zero: {:?}", s.live());
    }
}

#[test]
fn a_kernel_too_long_for_the_clock_runs_until_its_context_goes() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let sim = sim::load().unwrap();
    let before = sim.stats();
    let ctx = sim.context(0).unwrap();
    let stream = ctx.stream().unwrap();
    let gpu = cudafd::spin::Device::open(0).unwrap();
    let spin_stream = gpu.stream().unwrap();
    let notifier = Notifier::new(Mechanism::Event).unwrap();
    // Their ends are past what a u64 of nanoseconds from now can count.
    stream.launch(Duration::MAX).unwrap();
    spin_stream.launch(Duration::MAX, false).unwrap();
    let mut fences = [
        notifier.watch(stream.as_raw()).unwrap(),
        notifier.watch(spin_stream.as_raw()).unwrap(),
    ];
    for (what, fence) in ["sim::Stream", "spin::Stream"].iter().zip(&mut fences) {
        match fence.wait(Some(Duration::from_millis(100))) {
            Err(Error::Timeout) => {}
            other => panic!("{what}: a kernel of Duration::MAX ended: {other:?}"),
        }
    }
    assert!(!cudafd::stream_done(stream.as_raw()));
    assert!(!cudafd::stream_done(spin_stream.as_raw()));
    // Destroying a context drops its queued work.
    drop((fences, notifier, stream, ctx, spin_stream, gpu));
    if let Err(s) = cudafd::stats::wait_for_zero(Duration::from_secs(10)) {
        panic!("live counts not back to zero: {:?}", s.live());
    }
    let after = sim.stats();
    assert_eq!(
        (after.contexts, after.streams, after.events, after.queued),
        (
            before.contexts,
            before.streams,
            before.events,
            before.queued
        )
    );
}
