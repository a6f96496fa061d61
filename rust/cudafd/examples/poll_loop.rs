//! No async runtime: wait for two kernels with plain poll(2) on the fd.
//!
//!   cargo run --example poll_loop            # the GPU (libcuda.so.1)
//!   cargo run --example poll_loop -- --sim   # the simulator
use std::os::unix::io::AsRawFd;
use std::time::Duration;

use cudafd::{spin, Mechanism, Notifier};

fn main() -> Result<(), cudafd::Error> {
    if std::env::args().any(|a| a == "--sim") {
        cudafd::sim::load()?;
    }
    let gpu = spin::Device::open(0)?;
    let (a, b) = (gpu.stream()?, gpu.stream()?);
    // No Tokio runtime here, so the notifier has no reactor: this loop drives it.
    let notifier = Notifier::new(Mechanism::Event)?;
    a.launch(Duration::from_millis(30), false)?;
    b.launch(Duration::from_millis(10), false)?;
    let mut fences = vec![
        ("a", notifier.watch(a.as_raw())?),
        ("b", notifier.watch(b.as_raw())?),
    ];
    while !fences.is_empty() {
        let mut p = libc::pollfd {
            fd: notifier.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        if unsafe { libc::poll(&mut p, 1, 5_000) } == 0 {
            eprintln!("nothing finished within 5 s");
            std::process::exit(1);
        }
        // Readable: try_wait drains the queue and reports whether this fence finished.
        fences.retain_mut(|(name, fence)| match fence.try_wait() {
            Some(result) => {
                println!("stream {name}: {result:?}");
                false
            }
            None => true,
        });
    }
    Ok(())
}
