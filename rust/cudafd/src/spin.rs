//! A GPU kernel of a chosen length, on a real GPU or the simulator, for
//! tests and demonstrations of async GPU code.
//!
//! [`Device::open`] retains a device's primary context and loads
//! `cudafd_spin`, a one-thread kernel that busy-waits on the GPU's
//! nanosecond clock (`%globaltimer`) for a given time and then, if asked,
//! stores to address 0, which the GPU reports as
//! `CUDA_ERROR_ILLEGAL_ADDRESS`. It is PTX for `sm_70`, compiled by the
//! driver for any Volta or newer GPU (Jetson Orin included). The simulator
//! runs a kernel of that name with the same meaning, so the same code tests
//! on both. It needs no CUDA toolkit: the driver libcudafd loaded provides
//! everything.
//!
//! On a real GPU a fault ends the whole process's use of that context: run
//! code that faults in a process of its own.
//!
//! ```no_run
//! # async fn demo() -> Result<(), cudafd::Error> {
//! use std::time::Duration;
//! let gpu = cudafd::spin::Device::open(0)?;
//! let stream = gpu.stream()?;
//! let notifier = cudafd::Notifier::new(cudafd::Mechanism::Event)?;
//! stream.launch(Duration::from_millis(2), false)?;
//! notifier.wait(stream.as_raw()).await?;
//! # Ok(()) }
//! ```

use std::os::raw::{c_char, c_void};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use crate::driver::{api, Api, Handle};
use crate::error::{cu, Error};
use crate::notifier::CUstream;

/// The project's one copy of the kernel, NUL-terminated for cuModuleLoadData.
const SPIN_PTX: &str = concat!(include_str!("../cudafd_spin.ptx"), "\0");

struct DeviceInner {
    api: &'static Api,
    ordinal: i32,
    ctx: Handle,
    module: Handle,
    spin: Handle,
}

// Safety: the driver API is thread-safe; these are handles any thread may
// pass to it (with the context made current around each call).
unsafe impl Send for DeviceInner {}
unsafe impl Sync for DeviceInner {}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        // libcudafd keeps side streams per context past the last notifier:
        // they must go while the context lives (a destroyed context's
        // streams must not be touched on a real driver).
        crate::stats::release_idle();
        let module = self.module;
        // After a fault the context refuses this; the release still counts.
        let _ = self.api.in_context(self.ctx, |api| {
            unsafe { (api.module_unload)(module) };
            Ok(())
        });
        unsafe { (self.api.primary_ctx_release)(self.ordinal) };
    }
}

/// A device's primary context with the `cudafd_spin` kernel loaded. Cheap
/// to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Device(Arc<DeviceInner>);

impl Device {
    /// Retain device `ordinal`'s primary context (the one the CUDA runtime
    /// and most bindings use) and load the kernel into it. Loads the driver
    /// if needed.
    pub fn open(ordinal: i32) -> Result<Device, Error> {
        let api = api()?;
        let mut dev = 0;
        let mut ctx = ptr::null_mut();
        unsafe {
            cu((api.init)(0), "cuInit")?;
            cu((api.device_get)(&mut dev, ordinal), "cuDeviceGet")?;
            cu(
                (api.primary_ctx_retain)(&mut ctx, dev),
                "cuDevicePrimaryCtxRetain",
            )?;
        }
        let loaded = api.in_context(ctx, |api| unsafe {
            let (mut module, mut spin) = (ptr::null_mut(), ptr::null_mut());
            cu(
                (api.module_load_data)(&mut module, SPIN_PTX.as_ptr() as *const c_void),
                "cuModuleLoadData",
            )?;
            let r = (api.module_get_function)(
                &mut spin,
                module,
                b"cudafd_spin\0".as_ptr() as *const c_char,
            );
            if let Err(e) = cu(r, "cuModuleGetFunction") {
                (api.module_unload)(module);
                return Err(e);
            }
            Ok((module, spin))
        });
        match loaded {
            Ok((module, spin)) => Ok(Device(Arc::new(DeviceInner {
                api,
                ordinal: dev,
                ctx,
                module,
                spin,
            }))),
            Err(e) => {
                unsafe { (api.primary_ctx_release)(dev) };
                Err(e)
            }
        }
    }

    /// The primary context's `CUcontext` handle.
    pub fn context(&self) -> Handle {
        self.0.ctx
    }

    /// A new non-blocking stream in the primary context (no implicit
    /// synchronisation with the legacy default stream).
    pub fn stream(&self) -> Result<Stream, Error> {
        let raw = self.0.api.stream_in(self.0.ctx)?;
        Ok(Stream {
            dev: self.clone(),
            raw,
        })
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("ordinal", &self.0.ordinal)
            .finish()
    }
}

/// A stream of a [`Device`]; destroyed on drop (queued work still runs).
pub struct Stream {
    dev: Device,
    raw: CUstream,
}

// Safety: as for DeviceInner.
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}

impl Stream {
    /// The `CUstream` handle, for [`Notifier::watch`](crate::Notifier::watch).
    pub fn as_raw(&self) -> CUstream {
        self.raw
    }

    /// Enqueue `cudafd_spin`: it runs for `duration` after the stream's
    /// earlier work, then faults the context (`CUDA_ERROR_ILLEGAL_ADDRESS`)
    /// if `fault`. Returns at once.
    pub fn launch(&self, duration: Duration, fault: bool) -> Result<(), Error> {
        let d = &self.dev.0;
        let mut ns: u64 = duration.as_nanos().min(u64::MAX as u128) as u64;
        let mut fault: u32 = fault.into();
        let mut params = [
            &mut ns as *mut u64 as *mut c_void,
            &mut fault as *mut u32 as *mut c_void,
        ];
        let (spin, stream) = (d.spin, self.raw);
        // cuLaunchKernel copies the parameters during the call.
        d.api.in_context(d.ctx, |api| {
            cu(
                unsafe {
                    (api.launch_kernel)(
                        spin,
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
                },
                "cuLaunchKernel",
            )
        })
    }

    /// Block until the stream's work so far has run (`cuStreamSynchronize`).
    pub fn synchronize(&self) -> Result<(), Error> {
        cu(
            unsafe { (self.dev.0.api.stream_synchronize)(self.raw) },
            "cuStreamSynchronize",
        )
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let raw = self.raw;
        let _ = self.dev.0.api.in_context(self.dev.0.ctx, |api| {
            unsafe { (api.stream_destroy)(raw) };
            Ok(())
        });
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Stream").field(&self.raw).finish()
    }
}
