//! Eight Tokio tasks share one notifier; each launches a kernel and awaits it.
//!
//!   cargo run --example tokio_wait            # the GPU (libcuda.so.1)
//!   cargo run --example tokio_wait -- --sim   # the simulator
use std::time::{Duration, Instant};

use cudafd::{spin, Mechanism, Notifier};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), cudafd::Error> {
    if std::env::args().any(|a| a == "--sim") {
        cudafd::sim::load()?;
    }
    let gpu = spin::Device::open(0)?;
    let notifier = Notifier::new(Mechanism::Event)?;
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let stream = gpu.stream()?;
        let notifier = notifier.clone();
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            stream.launch(Duration::from_millis(1 + i), false)?;
            let wait = notifier.wait(stream.as_raw()); // see Notifier::wait on Rust < 1.64
            wait.await?;
            Ok::<_, cudafd::Error>(start.elapsed())
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let took = t.await.expect("the task does not panic")?;
        println!(
            "task {i}: {} ms kernel done after {:.2} ms",
            1 + i,
            took.as_secs_f64() * 1e3
        );
    }
    Ok(())
}
