//! A simulated CUDA device, for testing async GPU code without a GPU.
//!
//! [`load`] loads `libcudafd_sim.so` (built with libcudafd) and makes it the
//! driver libcudafd uses, so it must run before anything loads the real one
//! (the first [`Notifier::new`](crate::Notifier::new),
//! [`driver_load`](crate::driver_load), ...). Alternatively set
//! `CUDAFD_DRIVER=/path/libcudafd_sim.so` in the environment.
//!
//! What the simulator does, as a GPU does:
//! - each stream runs its work in order; one scheduler thread stands for
//!   the device and starts every stream's next operation as soon as it can;
//! - a kernel occupies its stream for its duration
//!   ([`Stream::launch`]);
//! - a kernel launched with a fault ([`Stream::launch_fault`]) makes the
//!   error sticky when it ends, in every context alive then (as on two GPUs
//!   of one host; `$CUDAFD_SIM_FAULT_SCOPE=context` keeps it to its own):
//!   from then on every call on those contexts returns the fault, and every
//!   wait there ends in it; a context made later is healthy;
//! - destroyed or made-up handles give `CUDA_ERROR_INVALID_HANDLE`, never a
//!   crash.
//!
//! It also implements `cuModuleLoadData` and the `cudafd_spin` kernel, so
//! [`spin::Device`](crate::spin::Device) runs on it unchanged.
//!
//! ```no_run
//! # async fn demo() -> Result<(), cudafd::Error> {
//! use std::time::Duration;
//! let sim = cudafd::sim::load()?;               // before the driver is loaded
//! let ctx = sim.context(0)?;
//! let stream = ctx.stream()?;
//! let notifier = cudafd::Notifier::new(cudafd::Mechanism::Event)?;
//! stream.launch(Duration::from_millis(5))?;     // a 5 ms kernel
//! notifier.wait(stream.as_raw()).await?;        // Ok after about 5 ms
//! # Ok(()) }
//! ```
//!
//! # Threads
//!
//! Every type here is `Send + Sync`. The simulator's scheduler and
//! host-function threads are its own and never run Rust code.

use std::os::raw::c_int;
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cudafd_sys as sys;
use cudafd_sys::sim as ffi;

use crate::driver::{api, Handle, Lib};
use crate::error::{cu, CudaError, Error};
use crate::notifier::CUstream;

/// The simulator library, loaded and named to libcudafd as its driver.
pub struct Simulator {
    path: PathBuf,
    ctx_create: ffi::cudafdsim_ctx_create,
    ctx_destroy: ffi::cudafdsim_ctx_destroy,
    launch: ffi::cudafdsim_launch,
    ctx_fault: ffi::cudafdsim_ctx_fault,
    stats: ffi::cudafdsim_stats,
}

static SIM: Mutex<Option<&'static Simulator>> = Mutex::new(None);

/// Where [`load`] looks: `$CUDAFD_SIM_LIB` if set, else `libcudafd_sim.so`
/// in the folder cudafd-sys linked libcudafd from ([`cudafd_sys::LIB_DIR`]).
pub fn default_path() -> PathBuf {
    match std::env::var_os("CUDAFD_SIM_LIB") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(sys::LIB_DIR).join("libcudafd_sim.so"),
    }
}

/// Load the simulator from [`default_path`] and make it libcudafd's driver.
/// Idempotent: later calls return the same simulator.
///
/// Fails if another driver was loaded already (call it first thing, before
/// any notifier exists), or if the library is missing or of another ABI.
pub fn load() -> Result<&'static Simulator, Error> {
    load_from(&default_path())
}

/// [`load`], from a given path. Once a simulator is loaded, the same path
/// returns it and any other fails (`CUDAFD_E_STATE`).
pub fn load_from(path: &Path) -> Result<&'static Simulator, Error> {
    let mut sim = SIM.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = *sim {
        if s.path == path {
            return Ok(s);
        }
        return Err(Error::Cudafd {
            code: sys::CUDAFD_E_STATE,
            message: format!("the simulator was loaded from {} already", s.path.display()),
            call: "cudafd::sim::load",
        });
    }
    let text = path.to_str().ok_or_else(|| Error::Cudafd {
        code: sys::CUDAFD_E_INVALID,
        message: format!("{} is not UTF-8", path.display()),
        call: "cudafd::sim::load",
    })?;
    let lib = Lib::open(text)?;
    // Until libcudafd takes it as its driver, nothing keeps a function of
    // the library or runs one: a library refused here is closed again.
    let s = match unsafe { Simulator::resolve(&lib, path, text) }
        .and_then(|s| crate::set_driver(path).map(|()| s))
    {
        Ok(s) => s,
        Err(e) => {
            lib.close();
            return Err(e);
        }
    };
    crate::driver_load()?;
    let s: &'static Simulator = Box::leak(Box::new(s));
    *sim = Some(s);
    Ok(s)
}

impl Simulator {
    /// The simulator's entry points in `lib`, if it has this crate's ABI.
    /// Safety: `lib` must stay open while the simulator is used.
    unsafe fn resolve(lib: &Lib, path: &Path, text: &str) -> Result<Simulator, Error> {
        let abi: ffi::cudafdsim_abi_version = lib.func("cudafdsim_abi_version")?;
        let got = abi();
        if got != ffi::CUDAFDSIM_ABI_VERSION {
            return Err(Error::Cudafd {
                code: sys::CUDAFD_E_INVALID,
                message: format!(
                    "{text} has simulator ABI {got}, this crate needs {}",
                    ffi::CUDAFDSIM_ABI_VERSION
                ),
                call: "cudafd::sim::load",
            });
        }
        Ok(Simulator {
            path: path.to_path_buf(),
            ctx_create: lib.func("cudafdsim_ctx_create")?,
            ctx_destroy: lib.func("cudafdsim_ctx_destroy")?,
            launch: lib.func("cudafdsim_launch")?,
            ctx_fault: lib.func("cudafdsim_ctx_fault")?,
            stats: lib.func("cudafdsim_stats")?,
        })
    }

    /// The library's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A new context on simulated device `device` (0 and 1 exist unless
    /// `$CUDAFD_SIM_DEVICES` says otherwise). A faulting kernel faults every
    /// context alive at the time, as on a GPU; a context made later is healthy
    /// (`$CUDAFD_SIM_FAULT_SCOPE=context` keeps a fault to its own context).
    pub fn context(&'static self, device: i32) -> Result<Context, Error> {
        let mut raw = ptr::null_mut();
        cu(
            unsafe { (self.ctx_create)(device, &mut raw) },
            "cudafdsim_ctx_create",
        )?;
        Ok(Context(Arc::new(ContextInner { sim: self, raw })))
    }

    /// The simulator's live counts, for leak checks.
    pub fn stats(&self) -> SimStats {
        let mut v = [0i64; ffi::CUDAFDSIM_STAT_COUNT as usize];
        unsafe { (self.stats)(v.as_mut_ptr(), v.len() as c_int) };
        SimStats {
            contexts: v[0],
            streams: v[1],
            events: v[2],
            queued: v[3],
            host_functions_run: v[4],
            kernels_run: v[5],
            dead_handle_calls: v[6],
            busy_semaphore_destroys: v[7],
        }
    }
}

impl std::fmt::Debug for Simulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulator")
            .field("path", &self.path)
            .finish()
    }
}

/// The simulator's counts (`cudafdsim_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Contexts alive (created, not destroyed; primary contexts while retained).
    pub contexts: i64,
    /// Streams alive (the user's and cudafd's side streams).
    pub streams: i64,
    /// Events alive.
    pub events: i64,
    /// Operations queued on streams and not yet run.
    pub queued: i64,
    /// Host functions run so far.
    pub host_functions_run: i64,
    /// Kernels run so far.
    pub kernels_run: i64,
    /// Calls given a dead event (destroyed, or gone with its context), or
    /// destroying an external semaphore of a destroyed context: a real
    /// driver crashes on one.
    pub dead_handle_calls: i64,
    /// External semaphores destroyed while a signal of theirs had not run
    /// (CUDA forbids it).
    pub busy_semaphore_destroys: i64,
}

struct ContextInner {
    sim: &'static Simulator,
    raw: Handle,
}

// Safety: a simulated context is a handle any thread may pass to the simulator.
unsafe impl Send for ContextInner {}
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        crate::stats::release_idle(); // the side streams libcudafd keeps go while the context lives
        unsafe { (self.sim.ctx_destroy)(self.raw) };
    }
}

/// A simulated CUDA context (not current anywhere). Cheap to clone; destroyed
/// with its streams when the last clone and the last [`Stream`] are gone.
#[derive(Clone)]
pub struct Context(Arc<ContextInner>);

impl Context {
    /// The `CUcontext` handle.
    pub fn as_raw(&self) -> Handle {
        self.0.raw
    }

    /// A new non-blocking stream in this context.
    pub fn stream(&self) -> Result<Stream, Error> {
        let raw = api()?.stream_in(self.0.raw)?;
        Ok(Stream {
            ctx: self.clone(),
            raw,
        })
    }

    /// The context's sticky fault: `None` while it is healthy.
    pub fn fault(&self) -> Result<Option<CudaError>, Error> {
        let mut fault = 0;
        cu(
            unsafe { (self.0.sim.ctx_fault)(self.0.raw, &mut fault) },
            "cudafdsim_ctx_fault",
        )?;
        Ok(CudaError::new(fault))
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Context").field(&self.0.raw).finish()
    }
}

/// A stream of a simulated context; destroyed on drop (work already queued
/// on it still runs).
pub struct Stream {
    ctx: Context,
    raw: CUstream,
}

// Safety: as for ContextInner.
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}

impl Stream {
    /// The `CUstream` handle, for [`Notifier::watch`](crate::Notifier::watch).
    pub fn as_raw(&self) -> CUstream {
        self.raw
    }

    /// The stream's context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Enqueue a kernel that runs for `duration` after the stream's earlier
    /// work. Returns at once.
    pub fn launch(&self, duration: Duration) -> Result<(), Error> {
        self.enqueue(duration, 0)
    }

    /// Enqueue a kernel that runs for `duration` and then faults the whole
    /// context with `fault` (sticky, as a real fault is).
    pub fn launch_fault(&self, duration: Duration, fault: CudaError) -> Result<(), Error> {
        self.enqueue(duration, fault.code())
    }

    fn enqueue(&self, duration: Duration, fault: i32) -> Result<(), Error> {
        let ns = duration.as_nanos().min(u64::MAX as u128) as u64;
        cu(
            unsafe { (self.ctx.0.sim.launch)(self.raw, ns, fault) },
            "cudafdsim_launch",
        )
    }

    /// Block until the stream's work so far has run (`cuStreamSynchronize`);
    /// the context's fault if it has one.
    pub fn synchronize(&self) -> Result<(), Error> {
        cu(
            unsafe { (api()?.stream_synchronize)(self.raw) },
            "cuStreamSynchronize",
        )
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Ok(api) = api() {
            let raw = self.raw;
            let _ = api.in_context(self.ctx.0.raw, |api| {
                unsafe { (api.stream_destroy)(raw) };
                Ok(())
            });
        }
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Stream").field(&self.raw).finish()
    }
}
