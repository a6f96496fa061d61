//! Errors: a failed GPU wait, a failed driver or cudafd call, a closed notifier.

use std::ffi::CStr;
use std::fmt;
use std::io;
use std::os::raw::{c_char, c_int};
use std::sync::Arc;

use cudafd_sys as sys;

/// A `CUresult` other than `CUDA_SUCCESS`, as the driver (or the simulator)
/// reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CudaError(i32);

impl CudaError {
    /// `CUDA_ERROR_INVALID_VALUE` (1).
    pub const INVALID_VALUE: CudaError = CudaError(1);
    /// `CUDA_ERROR_INVALID_CONTEXT` (201).
    pub const INVALID_CONTEXT: CudaError = CudaError(201);
    /// `CUDA_ERROR_INVALID_HANDLE` (400): a destroyed or made-up stream or event.
    pub const INVALID_HANDLE: CudaError = CudaError(400);
    /// `CUDA_ERROR_ILLEGAL_ADDRESS` (700): what a kernel's stray store ends in.
    pub const ILLEGAL_ADDRESS: CudaError = CudaError(700);
    /// `CUDA_ERROR_LAUNCH_FAILED` (719).
    pub const LAUNCH_FAILED: CudaError = CudaError(719);

    /// The error with this `CUresult` code; `None` for 0 (`CUDA_SUCCESS`).
    pub fn new(code: i32) -> Option<CudaError> {
        if code == 0 {
            None
        } else {
            Some(CudaError(code))
        }
    }

    /// Whether it is a fault: an error after which its context can do no
    /// more work, every later call on it failing the same way (libcudafd's
    /// sticky errors but `CUDA_ERROR_CONTEXT_IS_DESTROYED`, which a destroyed
    /// context gives).
    pub(crate) fn is_fault(self) -> bool {
        matches!(self.0, 214 | 700 | 702 | 710 | 714..=719)
    }

    /// The `CUresult` code, e.g. 700.
    pub fn code(self) -> i32 {
        self.0
    }

    /// The driver's name for the code, e.g. `"CUDA_ERROR_ILLEGAL_ADDRESS"`
    /// (`"CUDA_ERROR_<code>"` for a code the driver does not know, or when no
    /// driver is loaded).
    pub fn name(self) -> String {
        // Never NULL; may be a thread-local buffer, so it is copied at once.
        unsafe { string(sys::cudafd_cuda_error_name(self.0)) }
    }
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

impl std::error::Error for CudaError {}

/// Why a cudafd call or a wait failed.
///
/// A fault on the GPU is [`Error::Gpu`], also where a watch finds its
/// context faulted already; another error while setting a wait up is
/// [`Error::Driver`] (a driver call cudafd made) or [`Error::Cudafd`]. Every
/// variant names the call it came from where there is one ([`Error::call`]).
/// `Clone`: a fault may reach several waiters.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Error {
    /// The awaited GPU work failed: the CUresult the context ended in. CUDA
    /// faults are sticky, so every wait of the faulted context gets one,
    /// from its watch where that came after the fault.
    Gpu(CudaError),
    /// A driver call failed (while cudafd set up a wait, or a call of
    /// [`sim`](crate::sim) or [`spin`](crate::spin)).
    Driver {
        /// The driver's error.
        error: CudaError,
        /// The call that failed, e.g. `"cudafd_watch_stream"`.
        call: &'static str,
    },
    /// A cudafd call failed: its negative `CUDAFD_E_*` code and message.
    Cudafd {
        /// The `CUDAFD_E_*` code (negative).
        code: i32,
        /// `cudafd_last_error()` of the failing call.
        message: String,
        /// The call that failed.
        call: &'static str,
    },
    /// The notifier was closed while the wait was pending (or before it).
    Closed,
    /// A blocking wait ran out of time; the wait stays pending.
    Timeout,
    /// Polling the file descriptor failed (the reactor, or `poll(2)`), or
    /// the reactor could not take it (a Tokio runtime without IO).
    Io(Arc<io::Error>),
}

impl Error {
    /// The CUDA error behind this one: the fault of [`Error::Gpu`] or the
    /// failed driver call of [`Error::Driver`].
    pub fn cuda(&self) -> Option<CudaError> {
        match self {
            Error::Gpu(e) => Some(*e),
            Error::Driver { error, .. } => Some(*error),
            _ => None,
        }
    }

    /// The call the error came from, where there is one.
    pub fn call(&self) -> Option<&'static str> {
        match self {
            Error::Driver { call, .. } | Error::Cudafd { call, .. } => Some(call),
            _ => None,
        }
    }

    pub(crate) fn io(e: io::Error) -> Error {
        Error::Io(Arc::new(e))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Gpu(e) => write!(f, "the awaited GPU work failed: {e}"),
            Error::Driver { error, call } => write!(f, "{call}: {error}"),
            Error::Cudafd {
                code,
                message,
                call,
            } => write!(f, "{call}: {message} (cudafd error {code})"),
            Error::Closed => write!(f, "the notifier was closed"),
            Error::Timeout => write!(f, "timed out; the wait is still pending"),
            Error::Io(e) => write!(f, "polling the notifier's fd: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Gpu(e) | Error::Driver { error: e, .. } => Some(e),
            Error::Io(e) => Some(&**e),
            _ => None,
        }
    }
}

/// Copies a C string (NULL gives "").
pub(crate) unsafe fn string(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// A cudafd return code as a Result, with this thread's last error.
pub(crate) fn check(rc: c_int, call: &'static str) -> Result<(), Error> {
    match rc {
        sys::CUDAFD_OK => Ok(()),
        sys::CUDAFD_E_CLOSED => Err(Error::Closed),
        sys::CUDAFD_E_CUDA => {
            let code = unsafe { sys::cudafd_last_cuda_error() };
            Err(Error::Driver {
                error: CudaError::new(code).unwrap_or(CudaError::INVALID_VALUE),
                call,
            })
        }
        code => Err(Error::Cudafd {
            code,
            message: unsafe { string(sys::cudafd_last_error()) },
            call,
        }),
    }
}

/// Whether the libcudafd this process loaded follows the header these
/// bindings declare ([`sys::CUDAFD_ABI_VERSION`]): a stale build of the
/// library would take the crate's arguments for others. Called before the
/// first use of the library by every entry point that loads the driver.
pub(crate) fn check_abi() -> Result<(), Error> {
    abi_matches(unsafe { sys::cudafd_abi_version() })
}

fn abi_matches(got: c_int) -> Result<(), Error> {
    if got == sys::CUDAFD_ABI_VERSION {
        return Ok(());
    }
    Err(Error::Cudafd {
        code: sys::CUDAFD_E_STATE,
        message: format!(
            "libcudafd has ABI version {got}, this crate needs {} (a stale build: rebuild it, \
             or point CUDAFD_LIB_DIR at a current one)",
            sys::CUDAFD_ABI_VERSION
        ),
        call: "cudafd_abi_version",
    })
}

/// A driver `CUresult` as a Result.
pub(crate) fn cu(rc: c_int, call: &'static str) -> Result<(), Error> {
    match CudaError::new(rc) {
        None => Ok(()),
        Some(error) => Err(Error::Driver { error, call }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_linked_library_has_the_abi_of_these_bindings() {
        check_abi().unwrap();
    }

    #[test]
    fn another_abi_is_refused_with_both_versions() {
        let err = abi_matches(sys::CUDAFD_ABI_VERSION - 1).unwrap_err();
        match err {
            Error::Cudafd {
                code,
                ref message,
                call,
            } => {
                assert_eq!(code, sys::CUDAFD_E_STATE);
                assert_eq!(call, "cudafd_abi_version");
                let want = format!(
                    "ABI version {}, this crate needs {}",
                    sys::CUDAFD_ABI_VERSION - 1,
                    sys::CUDAFD_ABI_VERSION
                );
                assert!(message.contains(&want), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}
