//! A small safe wrapper over libcudafd (include/cudafd.h) for Tokio.
//!
//! A [`Notifier`] owns one cudafd notifier and registers its eventfd with
//! Tokio's reactor through [`AsyncFd`]. [`Notifier::watch`] marks the current
//! end of a CUDA stream and returns a [`Watch`]; awaiting [`Watch::done`] (or
//! [`Notifier::wait`], which does both) yields once the GPU has passed that
//! point, or the CUDA error that stopped it.
//!
//! Dispatch: every pending token has a `oneshot` sender in a map. Any task
//! that awaits a watch also waits for the fd to become readable; whichever of
//! them is woken first drains *all* queued completions and sends each to its
//! token's receiver. So any number of tasks, on any worker threads, can await
//! one notifier without a dedicated reader task. (Tokio wakes every task that
//! waits on the fd's readiness; the others find the queue empty. That is cheap
//! for tens of waiters; for thousands, one reader task would scale better.)
//!
//! Facts from cudafd.h this relies on:
//!  - The fd is readable exactly while completions are queued (or the notifier
//!    is closed), and the cudafd_drain() that empties the queue also clears it.
//!    Tokio registers fds edge-triggered, so a reader must drain until
//!    cudafd_drain() returns 0 before clearing Tokio's readiness: a completion
//!    queued after that raises a new edge, and clear_ready() never clears a
//!    readiness newer than the one it was handed.
//!  - cudafd_watch_stream, cudafd_drain and cudafd_cancel may be called from
//!    any thread concurrently; cudafd_notifier_destroy must be the last call.
//!  - A completion's status is 0 or a positive CUresult.

use std::collections::HashMap;
use std::ffi::CStr;
use std::fmt;
use std::io;
use std::os::raw::{c_char, c_int};
use std::os::unix::io::{AsRawFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::{Mutex, MutexGuard};

use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;

/// The C API, declared by hand from include/cudafd.h (ABI version 1).
/// build.rs links libcudafd.so.
mod ffi {
    use std::os::raw::{c_char, c_int};

    /// `cudafd_notifier`, opaque.
    #[repr(C)]
    pub struct Notifier {
        _private: [u8; 0],
    }

    /// `cudafd_completion`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    pub struct Completion {
        pub token: u64,
        pub status: i64,
    }

    pub const OK: c_int = 0;
    pub const E_CLOSED: c_int = -2;
    pub const E_CUDA: c_int = -7;

    extern "C" {
        pub fn cudafd_version() -> *const c_char;
        pub fn cudafd_last_error() -> *const c_char;
        pub fn cudafd_last_cuda_error() -> c_int;
        pub fn cudafd_driver_load() -> c_int;
        pub fn cudafd_driver_path() -> *const c_char;
        pub fn cudafd_driver_version(version: *mut c_int) -> c_int;
        pub fn cudafd_cuda_error_name(code: c_int) -> *const c_char;
        pub fn cudafd_notifier_create(mechanism: c_int, out: *mut *mut Notifier) -> c_int;
        pub fn cudafd_notifier_fd(n: *const Notifier) -> c_int;
        pub fn cudafd_watch_stream(n: *mut Notifier, stream: usize, token: *mut u64) -> c_int;
        pub fn cudafd_cancel(n: *mut Notifier, token: u64) -> c_int;
        pub fn cudafd_drain(n: *mut Notifier, out: *mut Completion, max: c_int) -> c_int;
        pub fn cudafd_notifier_destroy(n: *mut Notifier);
    }
}

/// A CUresult other than CUDA_SUCCESS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaError(pub i32);

/// CUDA_ERROR_ILLEGAL_ADDRESS: what a kernel's store to address 0 ends in.
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CudaError = CudaError(700);

impl CudaError {
    /// The driver's name for the code, e.g. "CUDA_ERROR_ILLEGAL_ADDRESS".
    pub fn name(&self) -> String {
        // Never NULL; may point to a thread-local buffer, so copy it at once.
        unsafe { string(ffi::cudafd_cuda_error_name(self.0)) }
    }
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

#[derive(Debug)]
pub enum Error {
    /// The awaited work failed on the GPU, or a driver call failed.
    Cuda(CudaError),
    /// A cudafd call failed: its negative CUDAFD_E_* code and message.
    Cudafd { code: i32, message: String },
    /// The notifier was closed while the wait was pending.
    Closed,
    /// Registering with or polling Tokio's reactor failed.
    Io(io::Error),
    /// Setting up the CUDA side failed (a missing entry point, say).
    Setup(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Cuda(e) => write!(f, "{e}"),
            Error::Cudafd { code, message } => write!(f, "cudafd error {code}: {message}"),
            Error::Closed => write!(f, "the notifier was closed"),
            Error::Io(e) => write!(f, "{e}"),
            Error::Setup(message) => write!(f, "{message}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<CudaError> for Error {
    fn from(e: CudaError) -> Self {
        Error::Cuda(e)
    }
}

unsafe fn string(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// Turn a cudafd return code into a Result, with this thread's last error.
fn check(rc: c_int) -> Result<(), Error> {
    match rc {
        ffi::OK => Ok(()),
        ffi::E_CUDA => Err(Error::Cuda(CudaError(unsafe {
            ffi::cudafd_last_cuda_error()
        }))),
        ffi::E_CLOSED => Err(Error::Closed),
        code => Err(Error::Cudafd {
            code,
            message: unsafe { string(ffi::cudafd_last_error()) },
        }),
    }
}

/// The version of libcudafd, e.g. "0.1.0".
pub fn version() -> String {
    unsafe { string(ffi::cudafd_version()) }
}

/// Load and initialise the CUDA driver: $CUDAFD_DRIVER if set, else libcuda.so.1.
pub fn driver_load() -> Result<(), Error> {
    check(unsafe { ffi::cudafd_driver_load() })
}

/// The path or soname the driver was loaded from.
pub fn driver_path() -> String {
    unsafe { string(ffi::cudafd_driver_path()) }
}

/// The driver's version, e.g. 12060 for CUDA 12.6.
pub fn driver_version() -> Result<i32, Error> {
    let mut version = 0;
    check(unsafe { ffi::cudafd_driver_version(&mut version) })?;
    Ok(version)
}

/// How a notifier learns that the GPU passed a point (CUDAFD_MECH_*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// Pooled events; a shared poller spins briefly, then paces; long waits block.
    Event = 0,
    /// cuLaunchHostFunc on a side stream; a watchdog surfaces faults.
    HostFunc = 1,
    /// Pooled events polled by a shared waiter thread while waits are pending.
    Spin = 2,
}

/// The eventfd as Tokio sees it. The notifier owns and closes it.
struct EventFd(RawFd);

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// One cudafd notifier: its eventfd registered with the Tokio reactor, and
/// the oneshot senders of its pending tokens.
pub struct Notifier {
    raw: NonNull<ffi::Notifier>,
    /// An Option only so that Drop can deregister it while the fd is still open.
    fd: Option<AsyncFd<EventFd>>,
    pending: Mutex<HashMap<u64, oneshot::Sender<i64>>>,
}

// Safety: cudafd's watch, drain and cancel calls are thread-safe (the notifier
// has its own lock), and destroy runs only in Drop, which has exclusive access.
unsafe impl Send for Notifier {}
unsafe impl Sync for Notifier {}

impl Notifier {
    /// A new notifier. Must be called inside a Tokio runtime (the fd is
    /// registered with its reactor).
    pub fn new(mechanism: Mechanism) -> Result<Notifier, Error> {
        let mut raw = ptr::null_mut();
        check(unsafe { ffi::cudafd_notifier_create(mechanism as c_int, &mut raw) })?;
        let raw = NonNull::new(raw).expect("cudafd_notifier_create returned OK and NULL");
        let fd = unsafe { ffi::cudafd_notifier_fd(raw.as_ptr()) };
        // Build the struct first: if registration fails, Drop destroys the notifier.
        let mut n = Notifier {
            raw,
            fd: None,
            pending: Mutex::new(HashMap::new()),
        };
        n.fd = Some(
            AsyncFd::with_interest(EventFd(fd), tokio::io::Interest::READABLE)
                .map_err(Error::Io)?,
        );
        Ok(n)
    }

    fn pending(&self) -> MutexGuard<'_, HashMap<u64, oneshot::Sender<i64>>> {
        // No code panics while holding it; recover the map if that ever changes.
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Mark the current end of `stream` (a CUstream handle; 0 is the legacy
    /// default stream of the calling thread's context) now: the returned
    /// watch completes once all work enqueued on it before this call finished.
    pub fn watch(&self, stream: usize) -> Result<Watch<'_>, Error> {
        let (tx, rx) = oneshot::channel();
        // Hold the map across the watch call: a drain on another thread may
        // see the token's completion at once, and must then find its sender.
        let mut pending = self.pending();
        let mut token = 0;
        check(unsafe { ffi::cudafd_watch_stream(self.raw.as_ptr(), stream, &mut token) })?;
        pending.insert(token, tx);
        Ok(Watch {
            notifier: self,
            token,
            rx,
            finished: false,
        })
    }

    /// Watch `stream` and await the point. The point is taken when the future
    /// is first polled; use [`Notifier::watch`] to take it right away.
    pub async fn wait(&self, stream: usize) -> Result<(), Error> {
        self.watch(stream)?.done().await
    }

    /// Move every queued completion to its token's receiver (the dispatcher).
    fn dispatch(&self) -> Result<(), Error> {
        let mut pending = self.pending();
        let mut batch = [ffi::Completion::default(); 64];
        loop {
            let got = unsafe {
                ffi::cudafd_drain(self.raw.as_ptr(), batch.as_mut_ptr(), batch.len() as c_int)
            };
            if got == ffi::E_CLOSED {
                pending.clear(); // dropping the senders ends every wait with Error::Closed
                return Ok(());
            }
            check(got.min(0))?;
            if got == 0 {
                return Ok(()); // the queue is empty and the fd is clear
            }
            for c in &batch[..got as usize] {
                // No sender: that watch was dropped after its completion was queued.
                if let Some(tx) = pending.remove(&c.token) {
                    let _ = tx.send(c.status); // Err: the receiver went away meanwhile
                }
            }
        }
    }
}

impl AsRawFd for Notifier {
    /// The eventfd (owned by the notifier), for use with other event loops.
    fn as_raw_fd(&self) -> RawFd {
        unsafe { ffi::cudafd_notifier_fd(self.raw.as_ptr()) }
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        // Deregister from the reactor before cudafd closes the fd: afterwards
        // the number could already belong to another file.
        drop(self.fd.take());
        // Pending waits are detached; their GPU work goes on.
        unsafe { ffi::cudafd_notifier_destroy(self.raw.as_ptr()) }
    }
}

/// A point on a stream, watched by a notifier. Dropping it before it is done
/// cancels the watch (the GPU work is unaffected).
pub struct Watch<'a> {
    notifier: &'a Notifier,
    token: u64,
    rx: oneshot::Receiver<i64>,
    finished: bool,
}

impl Watch<'_> {
    /// Wait until the GPU passed the point: Ok, or the CUDA error that the
    /// work (or its context) ended in, e.g. CUDA_ERROR_ILLEGAL_ADDRESS.
    pub async fn done(mut self) -> Result<(), Error> {
        let n = self.notifier;
        let fd = n.fd.as_ref().expect("registered until the notifier drops");
        loop {
            tokio::select! {
                // Our own result first: it may have been dispatched by another task.
                biased;
                status = &mut self.rx => {
                    self.finished = true;
                    return match status {
                        Ok(0) => Ok(()),
                        Ok(code) => Err(Error::Cuda(CudaError(code as i32))),
                        Err(_) => Err(Error::Closed),
                    };
                }
                ready = fd.readable() => {
                    let mut guard = ready.map_err(Error::Io)?;
                    n.dispatch()?;
                    // Drained to empty: now Tokio may wait for the next edge.
                    guard.clear_ready();
                }
            }
        }
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut pending = self.notifier.pending();
        if pending.remove(&self.token).is_some() {
            // Not dispatched yet. If it is already queued, cancel answers
            // CUDAFD_E_UNKNOWN_TOKEN and the dispatcher drops it: either way it
            // is never reported.
            unsafe { ffi::cudafd_cancel(self.notifier.raw.as_ptr(), self.token) };
        }
    }
}
