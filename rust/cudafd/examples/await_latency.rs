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
//! - `event`, `spin`: `Notifier::wait` on a notifier of that mechanism;
//! - `ask<N>`: the task yields to the runtime and asks `stream_done` again
//!   until the wait is N µs old, then `Notifier::wait` (event): what asking
//!   before the fd would buy a tiny kernel, and cost a longer one.
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

#[derive(Clone, Copy, Debug, PartialEq)]
enum Way {
    Floor,
    Wait(Mechanism),
    Ask(u64),
}

impl Way {
    fn name(&self) -> String {
        match self {
            Way::Floor => "floor".into(),
            Way::Wait(Mechanism::Spin) => "spin".into(),
            Way::Wait(Mechanism::HostFunc) => "hostfunc".into(),
            Way::Wait(Mechanism::Event) => "event".into(),
            Way::Ask(us) => format!("ask{us}"),
        }
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
    let ways = [
        Way::Floor,
        Way::Wait(Mechanism::Event),
        Way::Wait(Mechanism::Spin),
        Way::Ask(20),
        Way::Ask(50),
    ];
    let event = Notifier::new(Mechanism::Event)?;
    let spinning = Notifier::new(Mechanism::Spin)?;
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
            for (k, way) in ways.iter().enumerate() {
                let s = &streams[k];
                let c0 = cpu_now();
                for _ in 0..waits {
                    s.launch(kernel, false)?;
                    let t0 = Instant::now();
                    match *way {
                        Way::Floor => while !cudafd::stream_done(s.as_raw()) {},
                        Way::Wait(Mechanism::Spin) => spinning.wait(s.as_raw()).await?,
                        Way::Wait(_) => event.wait(s.as_raw()).await?,
                        Way::Ask(window) => {
                            let window = Duration::from_micros(window);
                            let mut over = false;
                            while t0.elapsed() < window {
                                tokio::task::yield_now().await;
                                if cudafd::stream_done(s.as_raw()) {
                                    over = true;
                                    break;
                                }
                            }
                            if !over {
                                event.wait(s.as_raw()).await?;
                            }
                        }
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
                way.name(),
                pct(&lat[k], 0.5) - floor,
                pct(&lat[k], 0.99) - floor,
                cpu[k].as_secs_f64() * 1e6 / lat[k].len() as f64
            );
        }
    }
    Ok(())
}
