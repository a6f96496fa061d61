//! Shared by the integration tests: the backend (the simulator unless
//! `CUDAFD_TEST_DRIVER=real`), one test at a time per binary (the counts of
//! `cudafd_stats` are process-wide), and the leak check.
#![allow(dead_code)] // each test binary uses a part

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use cudafd::{sim, spin, CUstream};

/// No wait in these tests should take nearly this long: a hang fails, it is not waited out.
pub const LIMIT: Duration = Duration::from_secs(20);

static SERIAL: Mutex<()> = Mutex::new(());

/// Whether the tests run on the real driver (`CUDAFD_TEST_DRIVER=real`).
pub fn real() -> bool {
    std::env::var("CUDAFD_TEST_DRIVER").map_or(false, |v| v == "real")
}

/// Start a test: holds the lock that runs this binary's tests one at a time,
/// and loads the simulator unless on the real driver.
pub fn start() -> MutexGuard<'static, ()> {
    let guard = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !real() {
        sim::load().expect("the simulator loads");
    }
    guard
}

/// Every live count of libcudafd back to zero (after the last notifier and
/// fence were dropped).
pub fn assert_no_leaks() {
    if let Err(s) = cudafd::stats::wait_for_zero(Duration::from_secs(10)) {
        panic!("live counts not back to zero: {:?}", s.live());
    }
}

/// A context to launch in: a fresh simulated context, or device 0's primary
/// context on the real driver.
pub enum Gpu {
    Sim(sim::Context),
    Real(spin::Device),
}

pub enum Stream {
    Sim(sim::Stream),
    Real(spin::Stream),
}

impl Gpu {
    pub fn open() -> Gpu {
        if real() {
            Gpu::Real(spin::Device::open(0).expect("device 0 opens"))
        } else {
            Gpu::Sim(
                sim::load()
                    .unwrap()
                    .context(0)
                    .expect("a simulated context"),
            )
        }
    }

    pub fn stream(&self) -> Stream {
        match self {
            Gpu::Sim(c) => Stream::Sim(c.stream().expect("a stream")),
            Gpu::Real(d) => Stream::Real(d.stream().expect("a stream")),
        }
    }
}

impl Stream {
    pub fn raw(&self) -> CUstream {
        match self {
            Stream::Sim(s) => s.as_raw(),
            Stream::Real(s) => s.as_raw(),
        }
    }

    /// A kernel of `ms` milliseconds; `fault`: it then faults the context
    /// with CUDA_ERROR_ILLEGAL_ADDRESS.
    pub fn launch(&self, ms: u64, fault: bool) {
        let d = Duration::from_millis(ms);
        match self {
            Stream::Sim(s) if fault => s.launch_fault(d, cudafd::CudaError::ILLEGAL_ADDRESS),
            Stream::Sim(s) => s.launch(d),
            Stream::Real(s) => s.launch(d, fault),
        }
        .expect("the launch is accepted")
    }

    pub fn synchronize(&self) -> Result<(), cudafd::Error> {
        match self {
            Stream::Sim(s) => s.synchronize(),
            Stream::Real(s) => s.synchronize(),
        }
    }
}

/// A current-thread Tokio runtime with timers, used only as an executor by
/// notifiers made outside it (they have no reactor).
pub fn executor() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
}

/// A multi-threaded Tokio runtime with `workers` threads.
pub fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("a runtime")
}
