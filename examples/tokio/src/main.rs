//! cudafd + Tokio: await CUDA work through `AsyncFd` on cudafd's eventfd.
//!
//!   cudafd-tokio [event|hostfunc|spin] [--tasks N] [--streams S] [--fault]
//!
//! Spawns N tasks (default 16) over S streams (default 4). Each task launches
//! the `cudafd_spin` kernel for a while and awaits it on one shared notifier,
//! with no runtime thread blocked on the GPU: a 1 ms heartbeat task keeps
//! ticking meanwhile. Prints each task's launch-to-completion latency. With
//! --fault it then launches a kernel that stores to address 0 and shows the
//! error the wait ends in, CUDA_ERROR_ILLEGAL_ADDRESS.
//!
//! The driver is $CUDAFD_DRIVER if set (libcudafd_sim.so: the simulator),
//! else libcuda.so.1. Exit status: 0 all checks passed, 1 a check failed,
//! 2 setup failed.

mod cudafd;
mod gpu;

use std::os::unix::io::AsRawFd;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::timeout;

use crate::cudafd::{Error, Mechanism, Notifier, CUDA_ERROR_ILLEGAL_ADDRESS};
use crate::gpu::Gpu;

const USAGE: &str = "usage: cudafd-tokio [event|hostfunc|spin] [--tasks N] [--streams S] [--fault]";

/// Kernel lengths the tasks cycle through, in microseconds.
const KERNEL_US: [u64; 6] = [200, 1000, 3000, 500, 6000, 2000];
/// No wait here should take nearly this long; a hang is reported, not waited out.
const WAIT_LIMIT: Duration = Duration::from_secs(10);

struct Options {
    mechanism: Mechanism,
    name: String,
    tasks: usize,
    streams: usize,
    fault: bool,
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        mechanism: Mechanism::Event,
        name: "event".into(),
        tasks: 16,
        streams: 4,
        fault: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |what: &str| -> Result<usize, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{what} needs a number"))
        };
        match arg.as_str() {
            "event" => o.mechanism = Mechanism::Event,
            "hostfunc" => o.mechanism = Mechanism::HostFunc,
            "spin" => o.mechanism = Mechanism::Spin,
            "--tasks" => o.tasks = number("--tasks")?,
            "--streams" => o.streams = number("--streams")?,
            "--fault" => o.fault = true,
            _ => return Err(format!("unknown argument {arg:?}")),
        }
        if !arg.starts_with('-') {
            o.name = arg;
        }
    }
    if o.tasks == 0 || o.streams < 2 {
        return Err("need at least 1 task and 2 streams".into());
    }
    Ok(o)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> ExitCode {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(opts).await {
        Ok(true) => {
            println!("all checks passed");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            println!("FAILED");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Await a watch, giving up after WAIT_LIMIT; also returns how long it took from `start`.
async fn finish(
    w: impl std::future::Future<Output = Result<(), Error>>,
    start: Instant,
) -> (Result<(), String>, Duration) {
    let r = match timeout(WAIT_LIMIT, w).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no completion within {} s", WAIT_LIMIT.as_secs())),
    };
    (r, start.elapsed())
}

async fn run(opts: Options) -> Result<bool, Error> {
    cudafd::driver_load()?;
    println!(
        "cudafd {}, driver {} (version {}), mechanism {}",
        cudafd::version(),
        cudafd::driver_path(),
        cudafd::driver_version()?,
        opts.name
    );
    let gpu = Arc::new(Gpu::open(opts.streams)?);
    let notifier = Arc::new(Notifier::new(opts.mechanism)?);
    println!(
        "notifier fd {} registered with Tokio; {} tasks on {} streams",
        notifier.as_raw_fd(),
        opts.tasks,
        opts.streams
    );
    let mut ok = true;

    // Ticks every millisecond for as long as the runtime's threads are free.
    let beats = Arc::new(AtomicU64::new(0));
    let heartbeat = {
        let beats = beats.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            loop {
                tick.tick().await;
                beats.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..opts.tasks {
        let (gpu, notifier) = (gpu.clone(), notifier.clone());
        let stream = task % opts.streams;
        let kernel_us = KERNEL_US[task % KERNEL_US.len()];
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            if let Err(e) = gpu.launch_spin(stream, kernel_us * 1000, false) {
                return (Err(format!("launch: {e}")), start.elapsed());
            }
            // The watch covers everything enqueued on the stream so far: a kernel
            // another task launched in between can delay it, never make it early.
            finish(notifier.wait(gpu.stream(stream)), start).await
        }));
    }

    let mut latencies = Vec::new();
    for (task, handle) in tasks.into_iter().enumerate() {
        let kernel_us = KERNEL_US[task % KERNEL_US.len()];
        let (result, took) = handle.await.expect("the task does not panic");
        let verdict = match &result {
            Ok(()) if took.as_micros() >= u128::from(kernel_us) => "ok".to_string(),
            Ok(()) => {
                ok = false;
                "EARLY: done before its kernel could have finished".to_string()
            }
            Err(e) => {
                ok = false;
                format!("FAILED: {e}")
            }
        };
        println!(
            "  task {task:2}  stream {}  kernel {:5.1} ms  launch -> done {:7.3} ms  {verdict}",
            task % opts.streams,
            kernel_us as f64 / 1e3,
            ms(took)
        );
        if result.is_ok() {
            latencies.push(took);
        }
    }
    let wall = t0.elapsed();
    heartbeat.abort();
    if !latencies.is_empty() {
        latencies.sort();
        println!(
            "{} waits: launch -> done min {:.3}  p50 {:.3}  max {:.3} ms; all done in {:.1} ms",
            latencies.len(),
            ms(latencies[0]),
            ms(latencies[latencies.len() / 2]),
            ms(latencies[latencies.len() - 1]),
            ms(wall)
        );
    }
    println!(
        "heartbeat: {} ticks of the 1 ms interval meanwhile",
        beats.load(Ordering::Relaxed)
    );

    if opts.fault {
        // A fault is sticky for the whole context: the faulting point ends in
        // CUDA_ERROR_ILLEGAL_ADDRESS, and so, normally, does the bystander
        // kernel still running in that context. The context is unusable after.
        println!("fault demo: a 300 ms kernel on stream 1, then a 20 ms kernel on stream 0 that stores to address 0");
        let start = Instant::now();
        gpu.launch_spin(1, 300_000_000, false)?;
        let bystander = notifier.watch(gpu.stream(1))?;
        gpu.launch_spin(0, 20_000_000, true)?;
        let faulting = notifier.watch(gpu.stream(0))?;
        let ((f, f_took), (b, b_took)) = tokio::join!(
            finish(faulting.done(), start),
            finish(bystander.done(), start)
        );
        let show = |r: &Result<(), String>| match r {
            Ok(()) => "ok".to_string(),
            Err(e) => e.clone(),
        };
        println!(
            "  stream 0 (faulting kernel): after {:6.1} ms: {}",
            ms(f_took),
            show(&f)
        );
        println!(
            "  stream 1 (bystander):       after {:6.1} ms: {}",
            ms(b_took),
            show(&b)
        );
        let expected = Error::Cuda(CUDA_ERROR_ILLEGAL_ADDRESS).to_string();
        if f.as_ref().err() != Some(&expected) {
            println!("  FAILED: expected {expected}");
            ok = false;
        }
    }

    // Both drop here, inside the runtime: the fd is deregistered, then closed.
    drop(notifier);
    drop(gpu);
    Ok(ok)
}
