//! The CUDA side of the example: device 0's primary context, a few streams,
//! and the `cudafd_spin` kernel, through the driver API resolved at run time.
//!
//! Facts this relies on:
//!  - The driver is the library libcudafd loaded (cudafd_driver_path():
//!    $CUDAFD_DRIVER or libcuda.so.1); dlopen of the same path returns that
//!    same, already initialised library. With CUDAFD_DRIVER pointing at
//!    libcudafd_sim.so everything runs on cudafd's simulator.
//!  - cuGetProcAddress_v2 (CUDA 12.0+) takes an entry point's base name and,
//!    for version 12000, returns its CUDA 12.0 ABI (cuCtxPushCurrent gives
//!    cuCtxPushCurrent_v2). The simulator implements it too. Drivers without
//!    it fall back to dlsym of the versioned export names.
//!  - cuLaunchKernel copies the parameters during the call: kernelParams
//!    holds one pointer per kernel parameter, in order.
//!  - A kernel fault is sticky: the context refuses all later work.

use std::ffi::CString;
use std::os::raw::{c_char, c_int, c_uint, c_void};
use std::ptr;

use crate::cudafd::{self, CudaError, Error};

type CUresult = c_int;
type Handle = *mut c_void; // CUcontext, CUstream, CUmodule, CUfunction

const CUDA_SUCCESS: CUresult = 0;
const CU_STREAM_NON_BLOCKING: c_uint = 0x1;
const CUDA_API_VERSION: c_int = 12000;

/// cudafd_spin(u64 ns, u32 fault): busy-waits on %globaltimer (nanoseconds)
/// for `ns`, then, if `fault` != 0, stores to address 0, which the GPU
/// reports as CUDA_ERROR_ILLEGAL_ADDRESS. sm_70 / PTX ISA 7.0, JIT-compiled by
/// the driver for any Volta-or-newer GPU (Jetson Orin's Ampere included). The
/// project's one copy of the kernel (src/cudafd/cudafd_spin.ptx); NUL-terminated for
/// cuModuleLoadData. The simulator accepts any image and runs a cudafd_spin
/// with the same semantics.
const SPIN_PTX: &str = concat!(include_str!("../../../src/cudafd/cudafd_spin.ptx"), "\0");

type GetProcAddress =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult;

/// The driver entry points used here.
struct Api {
    init: unsafe extern "C" fn(c_uint) -> CUresult,
    device_get: unsafe extern "C" fn(*mut c_int, c_int) -> CUresult,
    primary_ctx_retain: unsafe extern "C" fn(*mut Handle, c_int) -> CUresult,
    primary_ctx_release: unsafe extern "C" fn(c_int) -> CUresult,
    ctx_push_current: unsafe extern "C" fn(Handle) -> CUresult,
    ctx_pop_current: unsafe extern "C" fn(*mut Handle) -> CUresult,
    stream_create: unsafe extern "C" fn(*mut Handle, c_uint) -> CUresult,
    stream_destroy: unsafe extern "C" fn(Handle) -> CUresult,
    module_load_data: unsafe extern "C" fn(*mut Handle, *const c_void) -> CUresult,
    module_get_function: unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> CUresult,
    module_unload: unsafe extern "C" fn(Handle) -> CUresult,
    #[allow(clippy::type_complexity)]
    launch_kernel: unsafe extern "C" fn(
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

/// One entry point: cuGetProcAddress_v2 with the base name, else dlsym of the
/// versioned export, else dlsym of the plain name.
unsafe fn resolve(
    lib: *mut c_void,
    gpa: Option<GetProcAddress>,
    name: &str,
    versioned: Option<&str>,
) -> Result<*mut c_void, Error> {
    let cname = CString::new(name).expect("no NUL in names");
    let mut f: *mut c_void = ptr::null_mut();
    if let Some(gpa) = gpa {
        let mut status = 0;
        if gpa(cname.as_ptr(), &mut f, CUDA_API_VERSION, 0, &mut status) != CUDA_SUCCESS {
            f = ptr::null_mut();
        }
    }
    if f.is_null() {
        if let Some(v) = versioned {
            let cv = CString::new(v).expect("no NUL in names");
            f = libc::dlsym(lib, cv.as_ptr());
        }
    }
    if f.is_null() {
        f = libc::dlsym(lib, cname.as_ptr());
    }
    if f.is_null() {
        return Err(Error::Setup(format!("the driver has no {name}")));
    }
    Ok(f)
}

/// A resolved address as the function pointer type `F`, which the caller's
/// context names. Safety: `F` must be the entry point's true signature.
unsafe fn entry<F: Copy>(address: *mut c_void) -> F {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    std::mem::transmute_copy(&address)
}

impl Api {
    /// Resolve from the library libcudafd loaded (call cudafd::driver_load first).
    fn load() -> Result<Api, Error> {
        let path = CString::new(cudafd::driver_path()).expect("a C string to begin with");
        unsafe {
            // Never closed: cudafd's threads use the same library until exit.
            let lib = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
            if lib.is_null() {
                return Err(Error::Setup(format!("dlopen {:?} failed", path)));
            }
            let gpa_sym = libc::dlsym(lib, b"cuGetProcAddress_v2\0".as_ptr() as *const c_char);
            let gpa: Option<GetProcAddress> = if gpa_sym.is_null() {
                None
            } else {
                Some(entry(gpa_sym))
            };
            // Each field's type tells entry() which function pointer it is.
            macro_rules! sym {
                ($name:expr) => {
                    entry(resolve(lib, gpa, $name, None)?)
                };
                ($name:expr, $versioned:expr) => {
                    entry(resolve(lib, gpa, $name, Some($versioned))?)
                };
            }
            Ok(Api {
                init: sym!("cuInit"),
                device_get: sym!("cuDeviceGet"),
                primary_ctx_retain: sym!("cuDevicePrimaryCtxRetain"),
                primary_ctx_release: sym!(
                    "cuDevicePrimaryCtxRelease",
                    "cuDevicePrimaryCtxRelease_v2"
                ),
                ctx_push_current: sym!("cuCtxPushCurrent", "cuCtxPushCurrent_v2"),
                ctx_pop_current: sym!("cuCtxPopCurrent", "cuCtxPopCurrent_v2"),
                stream_create: sym!("cuStreamCreate"),
                stream_destroy: sym!("cuStreamDestroy", "cuStreamDestroy_v2"),
                module_load_data: sym!("cuModuleLoadData"),
                module_get_function: sym!("cuModuleGetFunction"),
                module_unload: sym!("cuModuleUnload"),
                launch_kernel: sym!("cuLaunchKernel"),
            })
        }
    }
}

fn cu(rc: CUresult) -> Result<(), Error> {
    if rc == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudaError(rc).into())
    }
}

/// Device 0's primary context with `cudafd_spin` loaded and a few streams.
pub struct Gpu {
    api: Api,
    device: c_int,
    ctx: Handle,
    module: Handle,
    spin: Handle,
    streams: Vec<Handle>,
}

// Safety: the driver API is thread-safe, and these handles are plain values
// that any thread may pass to it (with the context made current, see below).
unsafe impl Send for Gpu {}
unsafe impl Sync for Gpu {}

impl Gpu {
    /// Retain the primary context of device 0, load the kernel, create
    /// `nstreams` non-blocking streams. cudafd::driver_load() must have succeeded.
    pub fn open(nstreams: usize) -> Result<Gpu, Error> {
        let api = Api::load()?;
        let mut device = 0;
        let mut ctx = ptr::null_mut();
        unsafe {
            cu((api.init)(0))?;
            cu((api.device_get)(&mut device, 0))?;
            cu((api.primary_ctx_retain)(&mut ctx, device))?;
        }
        // From here on Drop releases what was made.
        let mut gpu = Gpu {
            api,
            device,
            ctx,
            module: ptr::null_mut(),
            spin: ptr::null_mut(),
            streams: Vec::new(),
        };
        let (module, spin) = gpu.in_context(|api| unsafe {
            // cuModuleLoadData JIT-compiles the PTX for the device at hand.
            let (mut module, mut spin) = (ptr::null_mut(), ptr::null_mut());
            cu((api.module_load_data)(
                &mut module,
                SPIN_PTX.as_ptr() as *const c_void,
            ))?;
            let r = (api.module_get_function)(
                &mut spin,
                module,
                b"cudafd_spin\0".as_ptr() as *const c_char,
            );
            if r != CUDA_SUCCESS {
                (api.module_unload)(module);
                return Err(CudaError(r).into());
            }
            Ok((module, spin))
        })?;
        gpu.module = module;
        gpu.spin = spin;
        for _ in 0..nstreams {
            let mut s = ptr::null_mut();
            // Non-blocking: no implicit synchronisation with the legacy default stream.
            gpu.in_context(|api| {
                cu(unsafe { (api.stream_create)(&mut s, CU_STREAM_NON_BLOCKING) })
            })?;
            gpu.streams.push(s);
        }
        Ok(gpu)
    }

    /// Run `f` with the context current on this thread, then restore the
    /// thread's previous context (Tokio moves tasks between worker threads,
    /// so nothing may rely on a context staying current).
    fn in_context<R>(&self, f: impl FnOnce(&Api) -> Result<R, Error>) -> Result<R, Error> {
        unsafe { cu((self.api.ctx_push_current)(self.ctx))? };
        let result = f(&self.api);
        let mut popped = ptr::null_mut();
        unsafe { (self.api.ctx_pop_current)(&mut popped) };
        result
    }

    /// The CUstream handle of stream `i`, as cudafd_watch_stream takes it.
    pub fn stream(&self, i: usize) -> usize {
        self.streams[i] as usize
    }

    /// Enqueue cudafd_spin (one thread) on stream `i`: it runs `ns`
    /// nanoseconds, then faults the context if `fault`. Returns at once.
    pub fn launch_spin(&self, i: usize, ns: u64, fault: bool) -> Result<(), Error> {
        let mut ns = ns;
        let mut fault: u32 = fault.into();
        let mut params = [
            &mut ns as *mut u64 as *mut c_void,
            &mut fault as *mut u32 as *mut c_void,
        ];
        let stream = self.streams[i];
        self.in_context(|api| {
            cu(unsafe {
                (api.launch_kernel)(
                    self.spin,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    stream,
                    params.as_mut_ptr(),
                    ptr::null_mut(),
                )
            })
        })
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // After a fault the context refuses these calls; nothing more to do then.
        let streams = std::mem::take(&mut self.streams);
        let module = self.module;
        let _ = self.in_context(|api| {
            for s in streams {
                unsafe { (api.stream_destroy)(s) };
            }
            if !module.is_null() {
                unsafe { (api.module_unload)(module) };
            }
            Ok(())
        });
        unsafe { (self.api.primary_ctx_release)(self.device) };
    }
}
