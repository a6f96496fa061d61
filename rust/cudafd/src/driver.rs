//! The driver library libcudafd loaded, and the few driver entry points that
//! [`sim`](crate::sim) and [`spin`](crate::spin) call.
//!
//! Facts this relies on:
//! - dlopen of the path libcudafd loaded (`cudafd_driver_path()`) returns
//!   that same, already initialised library.
//! - `cuGetProcAddress_v2` (CUDA 12.0 drivers and newer, and the simulator)
//!   takes a base name and, for version 12000, returns the CUDA 12.0 ABI of
//!   the entry point (`cuCtxPushCurrent` gives `cuCtxPushCurrent_v2`).
//!   Older drivers export the `_v2` names, tried next.

use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::ptr;
use std::sync::Mutex;

use cudafd_sys as sys;

use crate::error::{cu, string, Error};

pub(crate) type CUresult = c_int;
pub(crate) type Handle = *mut c_void;

pub(crate) const CU_STREAM_NON_BLOCKING: c_uint = 0x1;
const CUDA_API_VERSION: c_int = 12000;

type GetProcAddress =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult;

/// A library opened with dlopen. The driver's is never closed (cudafd's
/// threads use it until the process exits).
pub(crate) struct Lib(Handle);

unsafe impl Send for Lib {}
unsafe impl Sync for Lib {}

impl Lib {
    pub(crate) fn open(path: &str) -> Result<Lib, Error> {
        let c = CString::new(path).map_err(|_| Error::Cudafd {
            code: sys::CUDAFD_E_INVALID,
            message: format!("a NUL byte in the path {path:?}"),
            call: "dlopen",
        })?;
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            let why = unsafe { string(libc::dlerror()) };
            return Err(Error::Cudafd {
                code: sys::CUDAFD_E_NODRIVER,
                message: format!("cannot load {path}: {why}"),
                call: "dlopen",
            });
        }
        Ok(Lib(h))
    }

    /// Close it. Only for a library none of whose code is in use: no
    /// function pointer of it kept, no thread of it started.
    pub(crate) fn close(self) {
        unsafe { libc::dlclose(self.0) };
    }

    /// The exported symbol `name`, or null.
    pub(crate) fn raw(&self, name: &str) -> Handle {
        let c = CString::new(name).expect("symbol names have no NUL");
        unsafe { libc::dlsym(self.0, c.as_ptr()) }
    }

    /// The exported symbol `name` as a function pointer of type `F`.
    /// Safety: `F` must be the symbol's true signature.
    pub(crate) unsafe fn func<F: Copy>(&self, name: &'static str) -> Result<F, Error> {
        let p = self.raw(name);
        if p.is_null() {
            return Err(missing(name));
        }
        Ok(cast(p))
    }
}

fn missing(name: &'static str) -> Error {
    Error::Cudafd {
        code: sys::CUDAFD_E_NODRIVER,
        message: format!("the library has no {name}"),
        call: "dlsym",
    }
}

/// An address as the function pointer type `F`. Safety: as [`Lib::func`].
unsafe fn cast<F: Copy>(p: Handle) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<Handle>());
    std::mem::transmute_copy(&p)
}

/// The driver entry points used by this crate's helpers.
pub(crate) struct Api {
    pub(crate) init: unsafe extern "C" fn(c_uint) -> CUresult,
    pub(crate) device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CUresult,
    pub(crate) primary_ctx_retain: unsafe extern "C" fn(*mut Handle, c_int) -> CUresult,
    pub(crate) primary_ctx_release: unsafe extern "C" fn(c_int) -> CUresult,
    pub(crate) ctx_push_current: unsafe extern "C" fn(Handle) -> CUresult,
    pub(crate) ctx_pop_current: unsafe extern "C" fn(*mut Handle) -> CUresult,
    pub(crate) stream_create: unsafe extern "C" fn(*mut Handle, c_uint) -> CUresult,
    pub(crate) stream_destroy: unsafe extern "C" fn(Handle) -> CUresult,
    pub(crate) stream_synchronize: unsafe extern "C" fn(Handle) -> CUresult,
    pub(crate) module_load_data: unsafe extern "C" fn(*mut Handle, *const c_void) -> CUresult,
    pub(crate) module_get_function:
        unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> CUresult,
    pub(crate) module_unload: unsafe extern "C" fn(Handle) -> CUresult,
    #[allow(clippy::type_complexity)]
    pub(crate) launch_kernel: unsafe extern "C" fn(
        Handle,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        Handle,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CUresult,
}

static API: Mutex<Option<&'static Api>> = Mutex::new(None);

/// The entry points of the driver libcudafd uses (loading it if needed).
pub(crate) fn api() -> Result<&'static Api, Error> {
    let mut api = API.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(a) = *api {
        return Ok(a);
    }
    crate::driver_load()?;
    let lib = Lib::open(&crate::driver_path())?;
    let a: &'static Api = Box::leak(Box::new(unsafe { Api::resolve(&lib)? }));
    *api = Some(a);
    Ok(a)
}

impl Api {
    unsafe fn resolve(lib: &Lib) -> Result<Api, Error> {
        let gpa = lib.raw("cuGetProcAddress_v2");
        let gpa: Option<GetProcAddress> = if gpa.is_null() { None } else { Some(cast(gpa)) };
        let entry =
            |name: &'static str, versioned: Option<&'static str>| -> Result<Handle, Error> {
                let mut f: Handle = ptr::null_mut();
                if let Some(gpa) = gpa {
                    let c = CString::new(name).expect("no NUL");
                    let mut status = 0;
                    if gpa(c.as_ptr(), &mut f, CUDA_API_VERSION, 0, &mut status) != 0 {
                        f = ptr::null_mut();
                    }
                }
                if f.is_null() {
                    if let Some(v) = versioned {
                        f = lib.raw(v);
                    }
                }
                if f.is_null() {
                    f = lib.raw(name);
                }
                if f.is_null() {
                    Err(missing(name))
                } else {
                    Ok(f)
                }
            };
        Ok(Api {
            init: cast(entry("cuInit", None)?),
            device_get: cast(entry("cuDeviceGet", None)?),
            primary_ctx_retain: cast(entry("cuDevicePrimaryCtxRetain", None)?),
            primary_ctx_release: cast(entry(
                "cuDevicePrimaryCtxRelease",
                Some("cuDevicePrimaryCtxRelease_v2"),
            )?),
            ctx_push_current: cast(entry("cuCtxPushCurrent", Some("cuCtxPushCurrent_v2"))?),
            ctx_pop_current: cast(entry("cuCtxPopCurrent", Some("cuCtxPopCurrent_v2"))?),
            stream_create: cast(entry("cuStreamCreate", None)?),
            stream_destroy: cast(entry("cuStreamDestroy", Some("cuStreamDestroy_v2"))?),
            stream_synchronize: cast(entry("cuStreamSynchronize", None)?),
            module_load_data: cast(entry("cuModuleLoadData", None)?),
            module_get_function: cast(entry("cuModuleGetFunction", None)?),
            module_unload: cast(entry("cuModuleUnload", None)?),
            launch_kernel: cast(entry("cuLaunchKernel", None)?),
        })
    }

    /// Run `f` with `ctx` current on this thread, then restore the previous
    /// context (async tasks move between threads: nothing may rely on a
    /// context staying current).
    pub(crate) fn in_context<R>(
        &self,
        ctx: Handle,
        f: impl FnOnce(&Api) -> Result<R, Error>,
    ) -> Result<R, Error> {
        cu(unsafe { (self.ctx_push_current)(ctx) }, "cuCtxPushCurrent")?;
        let r = f(self);
        let mut popped = ptr::null_mut();
        unsafe { (self.ctx_pop_current)(&mut popped) };
        r
    }

    /// A new non-blocking stream in `ctx`.
    pub(crate) fn stream_in(&self, ctx: Handle) -> Result<Handle, Error> {
        self.in_context(ctx, |api| {
            let mut s = ptr::null_mut();
            cu(
                unsafe { (api.stream_create)(&mut s, CU_STREAM_NON_BLOCKING) },
                "cuStreamCreate",
            )?;
            Ok(s)
        })
    }
}
