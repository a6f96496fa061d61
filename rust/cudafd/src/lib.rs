//! Await CUDA stream progress from async Rust (Tokio, async-io/smol) or any
//! `poll(2)` loop, without blocking a thread on the GPU.
//!
//! cudafd gives a program a file descriptor that becomes readable when a
//! CUDA stream reaches a point. This crate wraps its C core (libcudafd, via
//! [`cudafd_sys`]): a [`Notifier`] owns the fd and watches streams; each
//! watch is a [`Fence`], a future of `Result<(), Error>`.
//!
//! ```no_run
//! # async fn demo(stream: cudafd::CUstream) -> Result<(), cudafd::Error> {
//! use cudafd::{Mechanism, Notifier};
//! let notifier = Notifier::new(Mechanism::Event)?; // inside a Tokio runtime
//! // ... enqueue kernels or copies on `stream` ...
//! notifier.wait(stream).await?;                    // Ok(()) or the CUDA error
//! # Ok(()) }
//! ```
//!
//! # Streams from CUDA bindings
//!
//! A stream is a raw [`CUstream`] (`*mut c_void`), as every binding has it:
//!
//! - cudarc: `stream.cu_stream() as cudafd::CUstream` (a `CudaStream`; the
//!   device's default stream is null, which means the legacy default stream
//!   of the calling thread's current context, or pass
//!   [`CU_STREAM_PER_THREAD`]).
//! - `cust`: `stream.as_inner() as cudafd::CUstream`.
//! - Raw driver API (`cuda-sys`, `cuda-driver-sys`, bindgen): the
//!   `CUstream` itself, cast with `as cudafd::CUstream`.
//! - The CUDA runtime API (`cudaStream_t`) is the same handle: cast it.
//!
//! The stream's context is made current around the watch, so a fence may be
//! created on any thread. cudafd loads the driver itself (`libcuda.so.1`,
//! or `$CUDAFD_DRIVER`, or [`set_driver`]); in one process that is the same
//! library the binding uses, so the handles are shared.
//!
//! # Event loops
//!
//! - **Tokio** (default feature `tokio`): create the notifier inside the
//!   runtime and await fences; the fd is registered through
//!   `tokio::io::unix::AsyncFd`, and one awaiting fence at a time drains it
//!   for all. Any number of tasks, on any worker threads, share a notifier.
//! - **async-io / smol**, or any reactor: watch the fd for readability and
//!   call [`Notifier::dispatch`] each time; fences are then plain futures:
//!
//!   ```ignore
//!   let notifier = cudafd::Notifier::new(cudafd::Mechanism::Event)?;
//!   let fd = async_io::Async::new(notifier.clone())?;   // Notifier: AsFd + AsRawFd
//!   smol::spawn(async move {
//!       loop {
//!           fd.readable().await?;
//!           fd.get_ref().dispatch()?;
//!       }
//!       #[allow(unreachable_code)] Ok::<_, std::io::Error>(())
//!   }).detach();
//!   notifier.wait(stream).await?;
//!   ```
//! - **`poll(2)`, epoll, a custom loop**: poll a fence's fd ([`AsRawFd`](std::os::unix::io::AsRawFd): the
//!   notifier's fd) and call [`Fence::try_wait`]; see
//!   `examples/poll_loop.rs`.
//! - **No loop**: [`Fence::wait`] blocks the thread, with a timeout.
//!
//! # Semantics
//!
//! - A watch marks all work enqueued on the stream *so far*; waits on one
//!   stream complete in the order they were watched.
//! - **Faults** are sticky in CUDA: once a context faults, every pending and
//!   later wait of that context ends in [`Error::Gpu`] with the fault (e.g.
//!   `CUDA_ERROR_ILLEGAL_ADDRESS`), at once, whichever stream it is on.
//! - **Cancellation**: dropping an unfinished [`Fence`] (or the future of
//!   [`Notifier::wait`], e.g. through `tokio::time::timeout` or `select!`)
//!   detaches its wait: it is never reported, and the GPU work goes on.
//!   [`Notifier::close`] does that for every wait of the notifier.
//! - **Threads**: all types are `Send + Sync`. cudafd runs a few native
//!   threads of its own, shared by all notifiers; they only queue
//!   completions and write eventfds, and never call Rust code. Wakers are
//!   woken by whichever thread drains the fd.
//! - **Accounting**: [`stats()`] shows what libcudafd has created and not yet
//!   freed; [`stats::wait_for_zero`] is a leak check for tests.
//!
//! # Without a GPU
//!
//! [`sim`] loads cudafd's simulated driver: contexts, streams, kernels of a
//! given length, injected faults. [`spin`] launches a kernel of a given
//! length on a real GPU or the simulator alike.
#![warn(missing_docs)]

use std::ffi::CString;
use std::path::Path;

use cudafd_sys as sys;

mod driver;
mod error;
mod fence;
mod notifier;
pub mod sim;
pub mod spin;
pub mod stats;

pub use cudafd_sys;
pub use error::{CudaError, Error};
pub use fence::Fence;
pub use notifier::{
    CUevent, CUstream, Mechanism, Notifier, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD,
};
pub use stats::{release_idle, stats, Stats};

use error::{check, string};

/// libcudafd's version, e.g. `"0.1.0"`.
pub fn version() -> String {
    unsafe { string(sys::cudafd_version()) }
}

/// Choose the driver library (a path or soname) before it is first loaded.
/// The default is `$CUDAFD_DRIVER` if set, else `libcuda.so.1`. After the
/// driver loaded: `Ok` if it is the same path, else an error
/// (`CUDAFD_E_STATE`).
pub fn set_driver(path: &Path) -> Result<(), Error> {
    let text = path
        .to_str()
        .and_then(|t| CString::new(t).ok())
        .ok_or_else(|| Error::Cudafd {
            code: sys::CUDAFD_E_INVALID,
            message: format!("not a usable path: {}", path.display()),
            call: "cudafd_set_driver",
        })?;
    check(
        unsafe { sys::cudafd_set_driver(text.as_ptr()) },
        "cudafd_set_driver",
    )
}

/// Load and initialise the driver now (idempotent, thread-safe). Every call
/// that needs it loads it anyway; this reports a missing driver early. A
/// libcudafd of another ABI than the crate's (a stale build) is refused with
/// `CUDAFD_E_STATE` here and by [`Notifier::new`].
pub fn driver_load() -> Result<(), Error> {
    error::check_abi()?;
    check(unsafe { sys::cudafd_driver_load() }, "cudafd_driver_load")
}

/// The path or soname the driver was loaded from (`""` before a load).
pub fn driver_path() -> String {
    unsafe { string(sys::cudafd_driver_path()) }
}

/// The driver's CUDA version, e.g. 12060 for 12.6 (loads the driver).
pub fn driver_version() -> Result<i32, Error> {
    let mut v = 0;
    check(
        unsafe { sys::cudafd_driver_version(&mut v) },
        "cudafd_driver_version",
    )?;
    Ok(v)
}

/// Whether all work enqueued on `stream` so far has finished without error:
/// one driver query, no wait. `false` also for work still running or a
/// fault (a watch then says which). A cheap check before a watch.
///
/// `stream` must be a live stream handle, as for
/// [`Notifier::watch`]: the real driver's behaviour for a destroyed or
/// made-up handle is undefined (only the simulator answers `false`).
pub fn stream_done(stream: CUstream) -> bool {
    unsafe { sys::cudafd_stream_done(stream as usize) == 1 }
}

/// Whether the event's latest record completed without error (as
/// [`stream_done`]). `event` must be a live event handle (or null, which
/// gives `false`).
pub fn event_done(event: CUevent) -> bool {
    unsafe { sys::cudafd_event_done(event as usize) == 1 }
}
