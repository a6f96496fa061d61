//! cudafd + Tokio: many tasks await CUDA kernels through one notifier.
//!
//! Spawns N tasks (default 16) over S streams (default 4). Each task
//! launches a kernel of 0.2 to 6 ms and awaits it, with no runtime thread
//! blocked on the GPU: a 1 ms heartbeat task keeps ticking meanwhile. With
//! --fault it then launches a kernel that stores to address 0 and shows the
//! error its wait, and a bystander's in the same context, end in.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudafd::{spin, CudaError, Error, Mechanism, Notifier};

const USAGE: &str = "\
usage: cudafd-tokio [event|hostfunc|spin] [--tasks N] [--streams S] [--fault] [--sim]

  event|hostfunc|spin  the notifier's mechanism (default event)
  --tasks N            tasks, each launching a kernel and awaiting it (default 16)
  --streams S          streams the tasks share, at least 2 (default 4)
  --fault              then fault the context and show the error (run it last:
                       on a GPU the context is lost)
  --sim                use cudafd's simulator (or set CUDAFD_DRIVER=.../libcudafd_sim.so)

The driver is $CUDAFD_DRIVER if set, else libcuda.so.1.
Exit status: 0 all checks passed, 1 a check failed, 2 setup failed.";

/// Kernel lengths the tasks cycle through, in microseconds.
const KERNEL_US: [u64; 6] = [200, 1000, 3000, 500, 6000, 2000];
/// No wait here should take nearly this long: a hang is reported, not waited out.
const LIMIT: Duration = Duration::from_secs(10);

struct Options {
    mechanism: Mechanism,
    tasks: usize,
    streams: usize,
    fault: bool,
    sim: bool,
}

fn parse_args() -> Result<Option<Options>, String> {
    let mut o = Options {
        mechanism: Mechanism::Event,
        tasks: 16,
        streams: 4,
        fault: false,
        sim: false,
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
            "--sim" => o.sim = true,
            "-h" | "--help" => return Ok(None),
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    if o.tasks == 0 || o.streams < 2 {
        return Err("need at least 1 task and 2 streams".into());
    }
    Ok(Some(o))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> ExitCode {
    let opts = match parse_args() {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
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

/// Await a wait with a limit; the outcome as text.
async fn finish(wait: impl std::future::Future<Output = Result<(), Error>>) -> Result<(), String> {
    match tokio::time::timeout(LIMIT, wait).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no completion within {} s", LIMIT.as_secs())),
    }
}

async fn run(opts: Options) -> Result<bool, Error> {
    if opts.sim {
        cudafd::sim::load()?;
    }
    cudafd::driver_load()?;
    println!(
        "cudafd {}, driver {} (version {}), mechanism {:?}",
        cudafd::version(),
        cudafd::driver_path(),
        cudafd::driver_version()?,
        opts.mechanism
    );
    let gpu = spin::Device::open(0)?;
    let streams = Arc::new(
        (0..opts.streams)
            .map(|_| gpu.stream())
            .collect::<Result<Vec<_>, _>>()?,
    );
    let notifier = Notifier::new(opts.mechanism)?;
    println!(
        "{} tasks on {} streams share one notifier",
        opts.tasks, opts.streams
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
    let tasks: Vec<_> = (0..opts.tasks)
        .map(|task| {
            let (streams, notifier) = (streams.clone(), notifier.clone());
            let kernel = Duration::from_micros(KERNEL_US[task % KERNEL_US.len()]);
            tokio::spawn(async move {
                let stream = &streams[task % streams.len()];
                let start = Instant::now();
                if let Err(e) = stream.launch(kernel, false) {
                    return (Err(format!("launch: {e}")), start.elapsed());
                }
                // Covers everything enqueued on the stream so far: another task's
                // kernel launched in between can delay it, never make it early.
                // A binding of its own: before Rust 1.64 the raw stream handle
                // in the awaited expression would make the task !Send.
                let wait = notifier.wait(stream.as_raw());
                (finish(wait).await, start.elapsed())
            })
        })
        .collect();

    let mut latencies = Vec::new();
    for (task, handle) in tasks.into_iter().enumerate() {
        let kernel_us = KERNEL_US[task % KERNEL_US.len()];
        let (result, took) = handle.await.expect("the task does not panic");
        let verdict = match &result {
            Ok(()) if took >= Duration::from_micros(kernel_us) => "ok".to_string(),
            Ok(()) => "EARLY: done before its kernel could have finished".to_string(),
            Err(e) => format!("FAILED: {e}"),
        };
        ok &= verdict == "ok";
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
    latencies.sort();
    if let (Some(first), Some(last)) = (latencies.first(), latencies.last()) {
        println!(
            "{} waits: launch -> done min {:.3}  p50 {:.3}  max {:.3} ms; all done in {:.1} ms",
            latencies.len(),
            ms(*first),
            ms(latencies[latencies.len() / 2]),
            ms(*last),
            ms(wall)
        );
    }
    println!(
        "heartbeat: {} ticks of the 1 ms interval meanwhile",
        beats.load(Ordering::Relaxed)
    );

    if opts.fault {
        // A fault is sticky for the whole context: the faulting point ends in
        // CUDA_ERROR_ILLEGAL_ADDRESS, and so does the bystander kernel still
        // running in that context. The context is unusable after.
        println!("fault demo: a 300 ms kernel on stream 1, then a 20 ms kernel on stream 0 that stores to address 0");
        let start = Instant::now();
        streams[1].launch(Duration::from_millis(300), false)?;
        let bystander = notifier.watch(streams[1].as_raw())?;
        streams[0].launch(Duration::from_millis(20), true)?;
        let faulting = notifier.watch(streams[0].as_raw())?;
        let (f, b) = tokio::join!(async { (finish(faulting).await, start.elapsed()) }, async {
            (finish(bystander).await, start.elapsed())
        });
        for (name, (r, took)) in [
            ("stream 0 (faulting kernel)", &f),
            ("stream 1 (bystander)      ", &b),
        ] {
            let shown = r.as_ref().err().cloned().unwrap_or_else(|| "ok".into());
            println!("  {name}: after {:6.1} ms: {shown}", ms(*took));
        }
        let expected = Error::Gpu(CudaError::ILLEGAL_ADDRESS).to_string();
        if f.0.as_ref().err() != Some(&expected) {
            println!("  FAILED: expected {expected}");
            ok = false;
        }
    }
    Ok(ok)
}
