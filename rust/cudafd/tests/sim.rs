//! The simulator as a test device: contexts fault alone, a fault's code
//! reaches the wait, and cudafd leaves no streams or events behind.
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
fn a_fault_stays_in_its_context_and_keeps_its_code() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let sim = sim::load().unwrap();
    assert!(sim.path().ends_with("libcudafd_sim.so"));
    assert_eq!(cudafd::driver_path(), sim.path().to_str().unwrap());
    let before = sim.stats();
    rt().block_on(async {
        let (bad, good) = (sim.context(0).unwrap(), sim.context(1).unwrap());
        let (bad_stream, good_stream) = (bad.stream().unwrap(), good.stream().unwrap());
        let notifier = Notifier::new(Mechanism::Event).unwrap();
        good_stream.launch(Duration::from_millis(100)).unwrap();
        bad_stream
            .launch_fault(Duration::from_millis(10), CudaError::LAUNCH_FAILED)
            .unwrap();
        let (b, g) = tokio::join!(
            tokio::time::timeout(LIMIT, notifier.wait(bad_stream.as_raw())),
            tokio::time::timeout(LIMIT, notifier.wait(good_stream.as_raw())),
        );
        match b.expect("no hang") {
            Err(Error::Gpu(e)) => {
                assert_eq!(e.code(), 719);
                assert_eq!(e.name(), "CUDA_ERROR_LAUNCH_FAILED");
            }
            other => panic!("{other:?}"),
        }
        g.expect("no hang")
            .expect("the other context is unaffected");
        assert_eq!(bad.fault().unwrap(), Some(CudaError::LAUNCH_FAILED));
        assert_eq!(good.fault().unwrap(), None);
        assert!(bad_stream.synchronize().is_err());
        good_stream.synchronize().unwrap();
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
    stream
        .launch_fault(Duration::from_millis(1), CudaError::ILLEGAL_ADDRESS)
        .unwrap();
    let fence = notifier.watch(stream.as_raw()).unwrap();
    assert!(stream.synchronize().is_err()); // faulted by the fence's first poll
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
