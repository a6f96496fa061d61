//! How late Tokio tasks resume after kernels of random lengths end, on many
//! streams at once, by way of waiting: a measurement, not a demonstration.
//!
//!   cargo run --release --example many_streams -- [--sim] [--streams 1,4,64]
//!       [--flavor current|multi] [--workers 4] [--ways event,spin,yield]
//!       [--rounds 3] [--seconds 0.4] [--lo-us 50] [--hi-us 3000]
//!
//! For each stream count N the ways take turns in every round (in an order
//! rotated each round), each running N tasks for `--seconds`: task i loops
//! over (a `cudafd_spin` kernel of a length uniform in lo..hi µs on stream i,
//! a timing event recorded after it, await). The ways:
//!
//! - `event`, `spin`: `Notifier::wait` on one notifier of that mechanism,
//!   shared by the N tasks, registered with the runtime's reactor;
//! - `yield`: `tokio::task::yield_now` until the timing event is done
//!   (polling, a core per runtime thread).
//!
//! Lateness is the time the task resumed minus its kernel's end, the end
//! read from the timing event (`cuEventElapsedTime`) against a reference
//! event mapped to the host clock at the start of each way's turn (spun on
//! until done: half the bracket is the error, printed). On the simulator,
//! which has no `cuEventElapsedTime`, the end is estimated as the launch's
//! host time plus the length, and the figures say so. Prints per N and way
//! the p50 and p99 lateness in µs, the waits, and the process's CPU in cores
//! over the turns' wall time. `CUDA_DEVICE_MAX_CONNECTIONS` is 32 unless set.
use std::os::raw::{c_float, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudafd::{spin, CUevent, CUstream, Mechanism, Notifier};

type Handle = *mut c_void;

/// The driver entry points the measurement itself needs (timing events).
#[derive(Clone, Copy)]
struct Cu {
    create: unsafe extern "C" fn(*mut Handle, c_uint) -> c_int,
    record: unsafe extern "C" fn(Handle, Handle) -> c_int,
    query: unsafe extern "C" fn(Handle) -> c_int,
    destroy: unsafe extern "C" fn(Handle) -> c_int,
    set_current: unsafe extern "C" fn(Handle) -> c_int,
    elapsed: Option<unsafe extern "C" fn(*mut c_float, Handle, Handle) -> c_int>,
}

impl Cu {
    fn load() -> Cu {
        let path = std::ffi::CString::new(cudafd::driver_path()).unwrap();
        let lib = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!lib.is_null(), "cannot open {}", cudafd::driver_path());
        let sym = |name: &str| {
            let c = std::ffi::CString::new(name).unwrap();
            unsafe { libc::dlsym(lib, c.as_ptr()) }
        };
        let need = |name: &str| {
            let p = sym(name);
            assert!(!p.is_null(), "the driver has no {name}");
            p
        };
        // Safety: each symbol is the driver's entry point of that signature.
        unsafe fn f<F: Copy>(p: *mut c_void) -> F {
            std::mem::transmute_copy(&p)
        }
        unsafe {
            Cu {
                create: f(need("cuEventCreate")),
                record: f(need("cuEventRecord")),
                query: f(need("cuEventQuery")),
                destroy: f(need("cuEventDestroy_v2")),
                set_current: f(need("cuCtxSetCurrent")),
                elapsed: match sym("cuEventElapsedTime") {
                    p if p.is_null() => None,
                    p => Some(f(p)),
                },
            }
        }
    }

    fn event(&self) -> Handle {
        let mut ev = std::ptr::null_mut();
        let rc = unsafe { (self.create)(&mut ev, 0) }; // CU_EVENT_DEFAULT: timed
        assert_eq!(rc, 0, "cuEventCreate");
        ev
    }
}

/// A raw handle that crosses threads (the driver's handles are thread-free).
#[derive(Clone, Copy)]
struct Raw(Handle);
unsafe impl Send for Raw {}
unsafe impl Sync for Raw {}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn list<T: std::str::FromStr>(name: &str, default: &str) -> Vec<T> {
    arg(name)
        .unwrap_or_else(|| default.into())
        .split(',')
        .map(|v| {
            v.parse()
                .ok()
                .unwrap_or_else(|| panic!("{name}: bad value {v:?}"))
        })
        .collect()
}

fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn pct(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// xorshift64*: lengths differ per task and round, the same for every way.
struct Rng(u64);
impl Rng {
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
        lo + (hi - lo) * (x as f64 / (1u64 << 53) as f64)
    }
}

/// One kernel awaited: its end event, when it was launched and how long it
/// ran for (the simulator's estimate), and when its task resumed.
struct Rec {
    ev: Raw,
    launched: Instant,
    seconds: f64,
    resumed: Instant,
}

#[derive(Clone, Copy, PartialEq)]
enum Way {
    Notified(Mechanism),
    Yield,
}

fn way_named(s: &str) -> Way {
    match s {
        "event" => Way::Notified(Mechanism::Event),
        "spin" => Way::Notified(Mechanism::Spin),
        "hostfunc" => Way::Notified(Mechanism::HostFunc),
        "yield" => Way::Yield,
        _ => panic!("--ways: event, spin, hostfunc or yield, not {s:?}"),
    }
}

struct Setup {
    cu: Cu,
    gpu: spin::Device,
    streams: Vec<Arc<spin::Stream>>,
    anchor_stream: spin::Stream,
    lo: f64,
    hi: f64,
    seconds: f64,
}

/// The reference event and the host time the GPU passed it (the midpoint of
/// the narrowest of five brackets), and half that bracket's width.
fn anchor(s: &Setup) -> (Raw, Instant, Duration) {
    let mut best: Option<(Raw, Instant, Duration)> = None;
    for _ in 0..5 {
        let ev = s.cu.event();
        let mut lo = Instant::now();
        unsafe { (s.cu.record)(ev, s.anchor_stream.as_raw()) };
        let (at, half) = loop {
            let t = Instant::now();
            if unsafe { (s.cu.query)(ev) } == 0 {
                let hi = Instant::now();
                let half = (hi - lo) / 2;
                break (lo + half, half);
            }
            lo = t;
        };
        match best {
            Some((_, _, h)) if h <= half => unsafe {
                (s.cu.destroy)(ev);
            },
            _ => {
                if let Some((old, _, _)) = best {
                    unsafe { (s.cu.destroy)(old.0) };
                }
                best = Some((Raw(ev), at, half));
            }
        }
    }
    best.unwrap()
}

/// N tasks over the first N streams for the turn's seconds; their records.
async fn turn(s: &Setup, notifier: Option<&Notifier>, n: usize, seed: u64) -> Vec<Rec> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in 0..n {
        let (stream, stop, cu) = (s.streams[i].clone(), stop.clone(), s.cu);
        let notifier = notifier.cloned();
        let (lo, hi) = (s.lo, s.hi);
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64 + 1));
        tasks.push(tokio::spawn(async move {
            let mut recs = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let seconds = rng.uniform(lo, hi) * 1e-6;
                let ev = Raw(cu.event());
                let launched = Instant::now();
                stream.launch(Duration::from_secs_f64(seconds), false)?;
                unsafe { (cu.record)(ev.0, stream.as_raw()) };
                match &notifier {
                    Some(n) => {
                        let w = n.wait(stream.as_raw() as CUstream);
                        w.await?
                    }
                    None => {
                        while !cudafd::event_done(ev.0 as CUevent) {
                            tokio::task::yield_now().await;
                        }
                    }
                }
                let resumed = Instant::now();
                if !stop.load(Ordering::Relaxed) {
                    recs.push(Rec {
                        ev,
                        launched,
                        seconds,
                        resumed,
                    });
                } else {
                    unsafe { (cu.destroy)(ev.0) };
                }
            }
            Ok::<_, cudafd::Error>(recs)
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(s.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        match tokio::time::timeout(Duration::from_secs(10), t).await {
            Ok(Ok(Ok(recs))) => all.extend(recs),
            Ok(Ok(Err(e))) => panic!("a wait failed: {e}"),
            Ok(Err(e)) => panic!("a task panicked: {e}"),
            Err(_) => panic!("a task was stuck for 10 s"),
        }
    }
    all
}

async fn run(s: Setup, ways: Vec<(String, Way)>, counts: Vec<usize>, rounds: usize) {
    let notifiers: Vec<Option<Notifier>> = ways
        .iter()
        .map(|(_, w)| match w {
            Way::Notified(m) => Some(Notifier::new(*m).expect("a notifier")),
            Way::Yield => None,
        })
        .collect();
    let mut estimated = false;
    for &n in &counts {
        let mut lat: Vec<Vec<f64>> = vec![Vec::new(); ways.len()];
        let mut cpu = vec![Duration::ZERO; ways.len()];
        let mut wall = vec![Duration::ZERO; ways.len()];
        let mut err = vec![Duration::ZERO; ways.len()];
        for r in 0..rounds {
            for j in 0..ways.len() {
                let k = (j + r) % ways.len();
                let (refev, at, half) = anchor(&s);
                let (c0, t0) = (cpu_now(), Instant::now());
                let recs = turn(&s, notifiers[k].as_ref(), n, (r * 1000 + n) as u64).await;
                wall[k] += t0.elapsed();
                cpu[k] += cpu_now() - c0;
                err[k] = err[k].max(half);
                for rec in recs {
                    let end = match s.cu.elapsed {
                        Some(f) => {
                            let mut ms: c_float = 0.0;
                            assert_eq!(
                                unsafe { f(&mut ms, refev.0, rec.ev.0) },
                                0,
                                "cuEventElapsedTime"
                            );
                            at + Duration::from_secs_f64(ms as f64 / 1e3)
                        }
                        None => {
                            estimated = true;
                            rec.launched + Duration::from_secs_f64(rec.seconds)
                        }
                    };
                    let us = if rec.resumed >= end {
                        (rec.resumed - end).as_secs_f64() * 1e6
                    } else {
                        -(end - rec.resumed).as_secs_f64() * 1e6
                    };
                    lat[k].push(us);
                    unsafe { (s.cu.destroy)(rec.ev.0) };
                }
                unsafe { (s.cu.destroy)(refev.0) };
                tokio::time::sleep(Duration::from_millis(2)).await; // let the last turn's threads go idle
            }
        }
        println!(
            "{n} streams, kernels uniform {:.0}-{:.0} µs{}",
            s.lo,
            s.hi,
            if estimated {
                " (ESTIMATED ends: simulator)"
            } else {
                ""
            }
        );
        for (k, (name, _)) in ways.iter().enumerate() {
            let l = &mut lat[k];
            l.sort_by(|a, b| a.partial_cmp(b).unwrap());
            println!(
                "  {:8} p50 {:8.1}  p99 {:8.1} µs  waits {:6}  cores {:5.2}  anchor ±{:.1} µs",
                name,
                pct(l, 0.5),
                pct(l, 0.99),
                l.len(),
                cpu[k].as_secs_f64() / wall[k].as_secs_f64(),
                err[k].as_secs_f64() * 1e6
            );
        }
    }
    drop(notifiers);
    let _ = &s.gpu;
}

fn main() -> Result<(), cudafd::Error> {
    if std::env::args().any(|a| a == "--sim") {
        cudafd::sim::load()?;
    }
    let counts: Vec<usize> = list("--streams", "1,4,64");
    let names: Vec<String> = list("--ways", "event,spin,yield");
    let ways = names.iter().map(|w| (w.clone(), way_named(w))).collect();
    let rounds: usize = arg("--rounds").and_then(|v| v.parse().ok()).unwrap_or(3);
    let flavor = arg("--flavor").unwrap_or_else(|| "current".into());
    let workers: usize = arg("--workers").and_then(|v| v.parse().ok()).unwrap_or(4);
    if std::env::var_os("CUDA_DEVICE_MAX_CONNECTIONS").is_none() {
        // 32 hardware queues (the driver's default is 8), so that kernels of
        // different streams are not serialised on the GPU, as in cudafd's
        // Python bench.
        std::env::set_var("CUDA_DEVICE_MAX_CONNECTIONS", "32");
    }
    let gpu = spin::Device::open(0)?;
    let cu = Cu::load();
    let ctx = Raw(gpu.context());
    let most = counts.iter().copied().max().unwrap_or(1);
    let setup = Setup {
        cu,
        streams: (0..most)
            .map(|_| gpu.stream().map(Arc::new))
            .collect::<Result<_, _>>()?,
        anchor_stream: gpu.stream()?,
        gpu,
        lo: arg("--lo-us").and_then(|v| v.parse().ok()).unwrap_or(50.0),
        hi: arg("--hi-us")
            .and_then(|v| v.parse().ok())
            .unwrap_or(3000.0),
        seconds: arg("--seconds").and_then(|v| v.parse().ok()).unwrap_or(0.4),
    };
    unsafe { (cu.set_current)(ctx.0) };
    let mut b = if flavor == "multi" {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let rt = b
        .enable_all()
        .on_thread_start(move || unsafe {
            let c = ctx;
            (cu.set_current)(c.0);
        })
        .build()
        .expect("a runtime");
    println!(
        "driver {}, {} runtime{}, {} rounds of {} s per way",
        cudafd::driver_path(),
        flavor,
        if flavor == "multi" {
            format!(" ({workers} workers)")
        } else {
            String::new()
        },
        rounds,
        setup.seconds
    );
    rt.block_on(run(setup, ways, counts, rounds));
    Ok(())
}
