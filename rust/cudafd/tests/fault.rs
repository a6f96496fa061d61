//! A fault reaches every waiter of its context. One test in a binary of its
//! own: on a real GPU the fault ends the process's use of the context.
mod common;

use std::time::{Duration, Instant};

use common::{assert_no_leaks, runtime, start, Gpu, LIMIT};
use cudafd::{CudaError, Error, Mechanism, Notifier};

#[test]
fn a_fault_reaches_every_waiter_of_the_context() {
    let _serial = start();
    let rt = runtime(2);
    rt.block_on(async {
        let gpu = Gpu::open();
        let (faulting, bystander, queued) = (gpu.stream(), gpu.stream(), gpu.stream());
        let (n1, n2) = (
            Notifier::new(Mechanism::Event).unwrap(),
            Notifier::new(Mechanism::HostFunc).unwrap(),
        );
        let start = Instant::now();
        // A long kernel that the fault cuts short, and work queued behind it.
        bystander.launch(8_000, false);
        let mut waits = vec![
            ("bystander (event)", tokio::spawn(n1.wait(bystander.raw()))),
            (
                "bystander (hostfunc)",
                tokio::spawn(n2.wait(bystander.raw())),
            ),
        ];
        queued.launch(8_000, false);
        queued.launch(10, false);
        waits.push(("queued behind", tokio::spawn(n1.wait(queued.raw()))));
        faulting.launch(20, true);
        waits.push(("faulting (event)", tokio::spawn(n1.wait(faulting.raw()))));
        waits.push(("faulting (hostfunc)", tokio::spawn(n2.wait(faulting.raw()))));
        for (name, w) in waits {
            let r = tokio::time::timeout(LIMIT, w)
                .await
                .expect("no hang")
                .unwrap();
            match r {
                Err(Error::Gpu(e)) => {
                    assert_eq!(e, CudaError::ILLEGAL_ADDRESS, "{name}");
                    assert_eq!(e.name(), "CUDA_ERROR_ILLEGAL_ADDRESS");
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        // Long before the 8 s kernels could have ended.
        assert!(
            start.elapsed() < Duration::from_secs(6),
            "the fault took {:?} to arrive",
            start.elapsed()
        );
        // Later waits in the context end in the fault too, on any of its
        // streams, whether the watch or the wait finds it.
        for (n, s) in [(&n1, &faulting), (&n2, &bystander)] {
            let r = tokio::time::timeout(LIMIT, n.wait(s.raw()))
                .await
                .expect("no hang");
            assert!(
                matches!(r, Err(Error::Gpu(CudaError::ILLEGAL_ADDRESS))),
                "a wait after the fault: {r:?}"
            );
        }
        drop((faulting, bystander, queued));
    });
    drop(rt);
    assert_no_leaks();
}
