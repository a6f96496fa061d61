//! Raw bindings to libcudafd: every call of `include/cudafd.h` (ABI version
//! 4, [`CUDAFD_ABI_VERSION`]), declared by hand, and the simulator's extra
//! calls as function-pointer types ([`sim`]).
//!
//! libcudafd gives any event loop a file descriptor that becomes readable
//! when a CUDA stream reaches a point. It loads the CUDA driver itself at run
//! time (`$CUDAFD_DRIVER`, else `libcuda.so.1`), so nothing here links
//! against CUDA. The safe API is the `cudafd` crate; use this one only for
//! calls it does not wrap.
//!
//! # Linking
//!
//! The build script links `libcudafd.so` from `$CUDAFD_LIB_DIR` if set, else
//! builds it (and `libcudafd_sim.so`) from the C sources shipped with this
//! crate with `make`. [`LIB_DIR`] names that folder. `cargo run` and
//! `cargo test` find the library there by themselves; a binary run any other
//! way needs it on the loader's path: `LD_LIBRARY_PATH`, or an rpath that
//! its own build script adds from `DEP_CUDAFD_LIB_DIR`.
//!
//! # Conventions
//!
//! Every function returning `c_int` returns [`CUDAFD_OK`] or a negative
//! `CUDAFD_E_*` code; [`cudafd_last_error`] then describes the failure on the
//! calling thread, and [`cudafd_last_cuda_error`] gives the `CUresult` behind
//! [`CUDAFD_E_CUDA`]. Stream and event handles are passed as `uintptr_t`
//! ([`usize`]): a `CUstream` or `CUevent` pointer cast to an integer. All
//! calls are thread-safe except [`cudafd_notifier_destroy`], which must be
//! the last call on its notifier. In a child forked after the library loaded
//! the driver, every call that would reach the driver returns
//! [`CUDAFD_E_STATE`].
#![allow(non_camel_case_types)]
#![warn(missing_docs)]

use std::os::raw::{c_char, c_int};

/// The folder this crate linked `libcudafd.so` from at build time: the
/// build's own output (which also holds `libcudafd_sim.so`), or
/// `$CUDAFD_LIB_DIR`.
pub const LIB_DIR: &str = env!("CUDAFD_SYS_LIB_DIR");

/// `CUDAFD_ABI_VERSION`: the header's version these declarations follow.
pub const CUDAFD_ABI_VERSION: c_int = 4;

/// Success.
pub const CUDAFD_OK: c_int = 0;
/// A bad argument (NULL notifier, unknown mechanism, ...).
pub const CUDAFD_E_INVALID: c_int = -1;
/// The notifier was closed.
pub const CUDAFD_E_CLOSED: c_int = -2;
/// Out of memory.
pub const CUDAFD_E_NOMEM: c_int = -3;
/// A system call failed; the message carries errno.
pub const CUDAFD_E_SYS: c_int = -4;
/// The driver library could not be loaded or initialised.
pub const CUDAFD_E_NODRIVER: c_int = -5;
/// Call not allowed now (a driver path after the driver loaded; after `fork()`).
pub const CUDAFD_E_STATE: c_int = -6;
/// A driver call failed: see [`cudafd_last_cuda_error`].
pub const CUDAFD_E_CUDA: c_int = -7;
/// The mechanism is not available with this driver.
pub const CUDAFD_E_UNSUPPORTED: c_int = -8;
/// cancel, ask: the token is unknown, already reported or cancelled.
pub const CUDAFD_E_UNKNOWN_TOKEN: c_int = -9;

/// Pooled events; a shared poller thread asks at intervals bounded by max_lateness.
pub const CUDAFD_MECH_EVENT: c_int = 0;
/// `cuLaunchHostFunc` on a side stream; a watchdog surfaces faults.
pub const CUDAFD_MECH_HOSTFUNC: c_int = 1;
/// Pooled events; a shared waiter polls while waits are pending.
pub const CUDAFD_MECH_SPIN: c_int = 2;
/// Jetson, experimental: a host1x syncpoint through NvSciSync, probe-gated
/// (see [`cudafd_syncfd_report`]).
pub const CUDAFD_MECH_SYNCFD: c_int = 3;

/// Option (hostfunc): how often pending points are checked for faults (ns).
pub const CUDAFD_OPT_WATCHDOG_NS: c_int = 0;
/// Option (event): the default max_lateness of new notifiers (ns).
pub const CUDAFD_OPT_MAX_LATENESS_NS: c_int = 1;

/// The default max_lateness (ns): the event mechanism finds a wait at most
/// this long after its work ended, plus the machine's thread wake-up time.
pub const CUDAFD_MAX_LATENESS_DEFAULT_NS: i64 = 400 * 1000;
/// The least max_lateness accepted (ns).
pub const CUDAFD_MAX_LATENESS_MIN_NS: i64 = 1000;
/// The largest max_lateness accepted (ns).
pub const CUDAFD_MAX_LATENESS_MAX_NS: i64 = 10 * 1000 * 1000 * 1000;

/// `CUDAFD_STAT_COUNT`: how many counts [`cudafd_stats`] fills at most.
pub const CUDAFD_STAT_COUNT: c_int = 12;

/// `cudafd_notifier`: opaque; only ever behind a pointer.
#[repr(C)]
pub struct cudafd_notifier {
    _private: [u8; 0],
}

/// `cudafd_completion`: one finished wait.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct cudafd_completion {
    /// As returned by `cudafd_watch_*`.
    pub token: u64,
    /// 0, or the `CUresult` of the failure (positive).
    pub status: i64,
}

extern "C" {
    // ---- library and driver ----
    /// The library's `CUDAFD_ABI_VERSION`: check it against [`CUDAFD_ABI_VERSION`].
    pub fn cudafd_abi_version() -> c_int;
    /// The library's version, e.g. "0.1.0" (static).
    pub fn cudafd_version() -> *const c_char;
    /// Thread-local description of the last failure on this thread ("" if none).
    pub fn cudafd_last_error() -> *const c_char;
    /// The `CUresult` behind the last `CUDAFD_E_CUDA` on this thread.
    pub fn cudafd_last_cuda_error() -> c_int;
    /// Choose the driver library before it is first loaded (NULL: the default).
    pub fn cudafd_set_driver(path: *const c_char) -> c_int;
    /// Load and initialise the driver (idempotent, thread-safe).
    pub fn cudafd_driver_load() -> c_int;
    /// The path given to dlopen ("" before any load attempt).
    pub fn cudafd_driver_path() -> *const c_char;
    /// The driver's version, e.g. 13000 (loads the driver).
    pub fn cudafd_driver_version(version: *mut c_int) -> c_int;
    /// The driver's name for a `CUresult`; never NULL.
    pub fn cudafd_cuda_error_name(code: c_int) -> *const c_char;
    /// Set a `CUDAFD_OPT_*` tunable (process-wide).
    pub fn cudafd_set_option(option: c_int, value: i64) -> c_int;
    /// Read a `CUDAFD_OPT_*` tunable.
    pub fn cudafd_get_option(option: c_int, value: *mut i64) -> c_int;
    /// `CUDAFD_OK` if the mechanism can be used here, else why not.
    pub fn cudafd_mechanism_available(mechanism: c_int) -> c_int;

    // ---- notifiers ----
    /// A new notifier with its own nonblocking, close-on-exec eventfd.
    pub fn cudafd_notifier_create(mechanism: c_int, out: *mut *mut cudafd_notifier) -> c_int;
    /// The eventfd to poll for readability (-1 for NULL); owned by the notifier.
    pub fn cudafd_notifier_fd(n: *const cudafd_notifier) -> c_int;
    /// The notifier's max_lateness for its later watches (ns, within
    /// [`CUDAFD_MAX_LATENESS_MIN_NS`], [`CUDAFD_MAX_LATENESS_MAX_NS`]).
    pub fn cudafd_notifier_set_max_lateness(n: *mut cudafd_notifier, ns: i64) -> c_int;
    /// Ask on this thread whether the wait of `token` (event or spin) is over: 1 with
    /// `*status` set (reported here, never drained), 0 not yet, or a negative error
    /// (`CUDAFD_E_UNKNOWN_TOKEN`: cancelled, or queued already: drain it;
    /// `CUDAFD_E_CLOSED` once closed; `CUDAFD_E_INVALID` for another mechanism).
    pub fn cudafd_ask_token(n: *mut cudafd_notifier, token: u64, status: *mut i64) -> c_int;
    /// A spin notifier whose callers call [`cudafd_ask_token`] while they wait (on: 1): its
    /// later waits are asked by the poller only as a backstop (every max(max_lateness, 10 ms)).
    pub fn cudafd_notifier_set_asking(n: *mut cudafd_notifier, on: c_int) -> c_int;
    /// Make now every side stream the notifier's waits in `stream`'s context may need.
    pub fn cudafd_prepare(n: *mut cudafd_notifier, stream: usize) -> c_int;
    /// Mark the current end of the stream (0, `CU_STREAM_LEGACY` and
    /// `CU_STREAM_PER_THREAD` allowed).
    pub fn cudafd_watch_stream(n: *mut cudafd_notifier, stream: usize, token: *mut u64) -> c_int;
    /// Completes when the event's latest record at the time of the call has
    /// completed; a context must be current.
    pub fn cudafd_watch_event(n: *mut cudafd_notifier, event: usize, token: *mut u64) -> c_int;
    /// 1 when all work enqueued on `stream` so far finished without error, else 0.
    pub fn cudafd_stream_done(stream: usize) -> c_int;
    /// 1 when the event's latest record completed without error, else 0.
    pub fn cudafd_event_done(event: usize) -> c_int;
    /// What the core keeps one stream's waits together by: the driver's id of
    /// the stream with the top bit set, else the handle (a driver hands a new
    /// stream the handle of one destroyed just before).
    pub fn cudafd_stream_key(stream: usize) -> u64;
    /// syncfd: watch a stream and get the point's sync_file in `fence_fd` (the caller closes it).
    pub fn cudafd_watch_stream_fence(
        n: *mut cudafd_notifier,
        stream: usize,
        token: *mut u64,
        fence_fd: *mut c_int,
    ) -> c_int;
    /// syncfd: watch an event and get the point's sync_file in `fence_fd` (the caller closes it).
    pub fn cudafd_watch_event_fence(
        n: *mut cudafd_notifier,
        event: usize,
        token: *mut u64,
        fence_fd: *mut c_int,
    ) -> c_int;
    /// The syncfd mechanism's self-test as text, one line per step (runs it on the first call,
    /// and again at a later one while the driver could not be loaded).
    pub fn cudafd_syncfd_report() -> *const c_char;
    /// Detach a pending wait: it will not be reported; the GPU work goes on.
    pub fn cudafd_cancel(n: *mut cudafd_notifier, token: u64) -> c_int;
    /// Move up to `max` completions into `out`; returns how many, or
    /// `CUDAFD_E_CLOSED` once closed and empty. `out` may be null when `max`
    /// is 0; `CUDAFD_E_INVALID` for a negative `max` or a null `out` with
    /// `max` above 0.
    pub fn cudafd_drain(n: *mut cudafd_notifier, out: *mut cudafd_completion, max: c_int) -> c_int;
    /// Watches not yet drained or cancelled.
    pub fn cudafd_notifier_pending(n: *const cudafd_notifier) -> c_int;
    /// Detach every pending wait, drop the queued completions and make the fd
    /// readable; later watches and drains return [`CUDAFD_E_CLOSED`].
    /// Idempotent, any thread.
    pub fn cudafd_notifier_close(n: *mut cudafd_notifier) -> c_int;
    /// Close, then free the notifier and its fd. No other call on `n` may be in
    /// progress or follow.
    pub fn cudafd_notifier_destroy(n: *mut cudafd_notifier);

    /// First wait until no wait that went already (cancelled, of a closed
    /// notifier, reported to [`cudafd_ask_token`] or early with a fault) is
    /// asked about any more; then destroy the idle events and side streams,
    /// the records and primary-context references of every context with no
    /// wait in flight, notifiers open or not (with no notifier open, the idle
    /// events of the others too). Returns how many streams it destroyed
    /// ([`CUDAFD_E_STATE`] in a child forked after the driver loaded). Call it
    /// before destroying a context of your own, once its waits ended, or to
    /// see every live count at zero (`cudafd.h` has the details).
    pub fn cudafd_release_idle() -> c_int;

    // ---- accounting ----
    /// The name of count `index` ("threads", "pending", ...), NULL past the end.
    pub fn cudafd_stat_name(index: c_int) -> *const c_char;
    /// Fill `out[0..n)` with the counts; returns how many were filled.
    pub fn cudafd_stats(out: *mut i64, n: c_int) -> c_int;
}

/// The simulator's own calls (`native/sim/cudafd_sim.h`), as function-pointer
/// types: `libcudafd_sim.so` is loaded at run time (with `dlopen`) and named
/// to libcudafd as its driver, never linked.
pub mod sim {
    use std::os::raw::{c_int, c_void};

    /// `CUresult`: 0 or a driver error code.
    pub type CUresult = c_int;
    /// `CUdevice`: a device ordinal.
    pub type CUdevice = c_int;
    /// `CUcontext`.
    pub type CUcontext = *mut c_void;
    /// `CUstream`.
    pub type CUstream = *mut c_void;

    /// `CUDAFDSIM_ABI_VERSION`.
    pub const CUDAFDSIM_ABI_VERSION: c_int = 1;
    /// `CUDAFDSIM_STAT_COUNT`.
    pub const CUDAFDSIM_STAT_COUNT: c_int = 8;

    /// `int cudafdsim_abi_version(void)`.
    pub type cudafdsim_abi_version = unsafe extern "C" fn() -> c_int;
    /// `CUresult cudafdsim_ctx_create(CUdevice dev, CUcontext *ctx)`: a new
    /// context, not current anywhere.
    pub type cudafdsim_ctx_create = unsafe extern "C" fn(CUdevice, *mut CUcontext) -> CUresult;
    /// `CUresult cudafdsim_ctx_destroy(CUcontext ctx)`, with its streams and events.
    pub type cudafdsim_ctx_destroy = unsafe extern "C" fn(CUcontext) -> CUresult;
    /// `CUresult cudafdsim_launch(CUstream, uint64_t duration_ns, CUresult fault)`:
    /// a kernel of that length; a nonzero `fault` faults the context when it ends.
    pub type cudafdsim_launch = unsafe extern "C" fn(CUstream, u64, CUresult) -> CUresult;
    /// `CUresult cudafdsim_ctx_fault(CUcontext, CUresult *fault)`: the sticky fault or 0.
    pub type cudafdsim_ctx_fault = unsafe extern "C" fn(CUcontext, *mut CUresult) -> CUresult;
    /// `int cudafdsim_stats(int64_t *out, int n)`: contexts, streams, events,
    /// queued operations, host functions run, kernels run, calls given a
    /// dead handle, semaphores destroyed with a signal not yet run.
    pub type cudafdsim_stats = unsafe extern "C" fn(*mut i64, c_int) -> c_int;
}
