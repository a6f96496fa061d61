//! How long a Tokio task waits for a short kernel, by way of waiting: a
//! measurement, not a demonstration.
//!
//!   cargo run --release --example await_latency [-- --sim] [--rounds N] [--waits N] [--lengths 5,50,200,1000]
//!
//! For each kernel length (µs), the ways take turns in every round, each
//! launching a kernel on its own stream and waiting for it `--waits` times
//! on a current-thread runtime:
//!
//! - `floor`: a loop on `stream_done` (no await): the earliest anything can tell;
//! - `event`, `spin`, `hostfunc`: `Notifier::wait` on a notifier of that mechanism.
//!
//! Prints per length and way the p50 and p99 of launch-return to await-return
//! minus the floor's p50, and the process CPU per wait (µs).
use std::time::{Duration, Instant};

use cudafd::{spin, Mechanism, Notifier};

fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// `None`: the floor; else `Notifier::wait` under that mechanism.
type Way = Option<Mechanism>;

fn name(way: Way) -> &'static str {
    match way {
        None => "floor",
        Some(Mechanism::Event) => "event",
        Some(Mechanism::Spin) => "spin",
        Some(Mechanism::HostFunc) => "hostfunc",
    }
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), cudafd::Error> {
    if std::env::args().any(|a| a == "--sim") {
        cudafd::sim::load()?;
    }
    let rounds: usize = arg("--rounds").and_then(|v| v.parse().ok()).unwrap_or(5);
    let waits: usize = arg("--waits").and_then(|v| v.parse().ok()).unwrap_or(200);
    let lengths: Vec<u64> = arg("--lengths")
        .unwrap_or_else(|| "5,50,200,1000".into())
        .split(',')
        .map(|v| v.parse().expect("--lengths: µs, comma-separated"))
        .collect();
    let gpu = spin::Device::open(0)?;
    let ways: [Way; 4] = [
        None,
        Some(Mechanism::Event),
        Some(Mechanism::Spin),
        Some(Mechanism::HostFunc),
    ];
    let notifiers = ways
        .iter()
        .map(|w| w.map(Notifier::new).transpose())
        .collect::<Result<Vec<_>, _>>()?;
    let streams = ways
        .iter()
        .map(|_| gpu.stream())
        .collect::<Result<Vec<_>, _>>()?;
    println!(
        "driver {}, {} rounds of {} waits per way and length",
        cudafd::driver_path(),
        rounds,
        waits
    );
    for &us in &lengths {
        let kernel = Duration::from_micros(us);
        let mut lat: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
        let mut cpu = vec![Duration::ZERO; ways.len()];
        for _ in 0..rounds {
            for k in 0..ways.len() {
                let s = &streams[k];
                let c0 = cpu_now();
                for _ in 0..waits {
                    s.launch(kernel, false)?;
                    let t0 = Instant::now();
                    match &notifiers[k] {
                        None => while !cudafd::stream_done(s.as_raw()) {},
                        Some(n) => n.wait(s.as_raw()).await?,
                    }
                    lat[k].push(t0.elapsed().as_secs_f64() * 1e6);
                }
                cpu[k] += cpu_now() - c0;
            }
        }
        for l in lat.iter_mut() {
            l.sort_by(|a, b| a.partial_cmp(b).unwrap());
        }
        let floor = pct(&lat[0], 0.5);
        println!("{us} µs kernels (floor p50 {floor:.1} µs after the launch returned)");
        for (k, way) in ways.iter().enumerate() {
            println!(
                "  {:8} p50 {:8.1}  p99 {:8.1}  µs CPU per wait {:7.1}",
                name(*way),
                pct(&lat[k], 0.5) - floor,
                pct(&lat[k], 0.99) - floor,
                cpu[k].as_secs_f64() * 1e6 / lat[k].len() as f64
            );
        }
    }
    Ok(())
}
