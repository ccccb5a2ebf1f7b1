//! An open GPU: its primary context, the kernel modules loaded into it (the driver JIT-compiles
//! PTX here, and its error log becomes part of the reason when it cannot), one stream, device
//! memory and kernel launches. Owns the lifetime rules: buffers keep the context alive, the
//! context is released after the last of them, modules are unloaded with it. It does not know
//! what the kernels compute (see `gpu-src/` and the backend).

use super::driver::{
    Api, CuContext, CuDevicePtr, CuFunction, CuModule, CuStream, JIT_ERROR_LOG_BUFFER,
    JIT_ERROR_LOG_BUFFER_SIZE_BYTES, JIT_INFO_LOG_BUFFER, JIT_INFO_LOG_BUFFER_SIZE_BYTES,
};
use super::error::{CudaFailure, GpuError, GpuUnavailable};
use super::probe::GpuInfo;
use std::ffi::{c_int, c_uint, c_void, CString};
use std::sync::Arc;

/// Bytes of each JIT log buffer.
const LOG_BYTES: usize = 16 * 1024;

/// A kernel image for one module: PTX text (JIT-compiled by the driver) or a cubin.
#[derive(Clone, Debug)]
pub struct ModuleImage {
    pub name: &'static str,
    /// PTX (the driver wants it NUL-terminated; [`Device::open`] sees to it) or cubin bytes.
    pub bytes: Vec<u8>,
}

/// The context and what was loaded into it; shared by the device and its buffers.
struct Context {
    api: &'static Api,
    info: GpuInfo,
    ctx: CuContext,
    stream: CuStream,
    modules: Vec<(&'static str, CuModule)>,
}

// SAFETY: the CUDA driver API is thread-safe; the handles are opaque values that any thread may
// pass once the context is made current on it, which every method does first.
unsafe impl Send for Context {}
// SAFETY: as above; nothing here is mutated after construction.
unsafe impl Sync for Context {}

impl Context {
    fn make_current(&self) -> Result<(), CudaFailure> {
        // SAFETY: the context is retained for as long as `self` lives.
        self.api.check("cuCtxSetCurrent", unsafe {
            (self.api.ctx_set_current)(self.ctx)
        })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // Failures here have nowhere to go; the process is usually ending.
        let _ = self.make_current();
        // SAFETY: the handles were created on this context and are released once, here.
        unsafe {
            for &(_, m) in &self.modules {
                (self.api.module_unload)(m);
            }
            (self.api.stream_destroy)(self.stream);
            (self.api.primary_ctx_release)(self.info.device);
        }
    }
}

/// An open GPU with its kernels loaded.
#[derive(Clone)]
pub struct Device {
    inner: Arc<Context>,
}

/// A kernel entry point of a loaded module.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    func: CuFunction,
}

// SAFETY: a function handle is an opaque value valid while its module is loaded (as long as the
// device); launching it from any thread is allowed.
unsafe impl Send for Kernel {}
// SAFETY: as above.
unsafe impl Sync for Kernel {}

/// One kernel argument, passed by value.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// A device pointer (a buffer's address, or 0 for a null pointer).
    Ptr(CuDevicePtr),
    I32(i32),
    F32(f32),
}

/// A launch's shape: grid and block dimensions and dynamic shared memory.
#[derive(Clone, Copy, Debug)]
pub struct LaunchShape {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_bytes: u32,
}

/// Device memory, freed when dropped.
pub struct DeviceBuffer {
    ctx: Arc<Context>,
    ptr: CuDevicePtr,
    bytes: usize,
}

impl DeviceBuffer {
    /// The device address, for kernel arguments.
    pub fn ptr(&self) -> CuDevicePtr {
        self.ptr
    }

    /// The address `offset` bytes in.
    pub fn at(&self, offset: usize) -> CuDevicePtr {
        debug_assert!(offset <= self.bytes);
        self.ptr + offset as u64
    }

    pub fn len_bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ptr != 0 && self.ctx.make_current().is_ok() {
            // SAFETY: allocated by cuMemAlloc on this context and freed once.
            unsafe { (self.ctx.api.mem_free)(self.ptr) };
        }
    }
}

impl Device {
    /// Makes `info`'s primary context current, creates a stream and loads `images` (the
    /// driver JIT-compiles PTX for this GPU; its error log goes into the reason).
    pub fn open(info: &GpuInfo, images: &[ModuleImage]) -> Result<Device, GpuUnavailable> {
        let api = info.api;
        let mut ctx: CuContext = std::ptr::null_mut();
        // SAFETY: writes one context handle for a device the probe found.
        api.check("cuDevicePrimaryCtxRetain", unsafe {
            (api.primary_ctx_retain)(&mut ctx, info.device)
        })?;
        // From here on the context is released by Context's Drop, whatever fails.
        let mut context = Context {
            api,
            info: info.clone(),
            ctx,
            stream: std::ptr::null_mut(),
            modules: Vec::new(),
        };
        context.make_current()?;
        let mut stream: CuStream = std::ptr::null_mut();
        // SAFETY: writes one stream handle; flags 0 (a blocking stream).
        api.check("cuStreamCreate", unsafe {
            (api.stream_create)(&mut stream, 0)
        })?;
        context.stream = stream;
        for image in images {
            let module = load_module(api, image)?;
            context.modules.push((image.name, module));
        }
        Ok(Device {
            inner: Arc::new(context),
        })
    }

    pub fn info(&self) -> &GpuInfo {
        &self.inner.info
    }

    /// The kernel `name` from whichever loaded module defines it.
    pub fn kernel(&self, name: &str) -> Result<Kernel, GpuError> {
        let c = &*self.inner;
        c.make_current()?;
        let cname = CString::new(name).map_err(|_| GpuError::NoKernel(name.to_string()))?;
        for &(_, module) in &c.modules {
            let mut func: CuFunction = std::ptr::null_mut();
            // SAFETY: the module is loaded; writes one function handle or fails.
            let code = unsafe { (c.api.module_get_function)(&mut func, module, cname.as_ptr()) };
            if code == 0 {
                return Ok(Kernel { func });
            }
        }
        Err(GpuError::NoKernel(name.to_string()))
    }

    /// `bytes` of device memory (contents undefined).
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, GpuError> {
        let c = &self.inner;
        c.make_current()?;
        let mut ptr: CuDevicePtr = 0;
        // SAFETY: writes one device address.
        c.api.check("cuMemAlloc", unsafe {
            (c.api.mem_alloc)(&mut ptr, bytes.max(1))
        })?;
        Ok(DeviceBuffer {
            ctx: Arc::clone(c),
            ptr,
            bytes,
        })
    }

    /// A new buffer holding `data`.
    pub fn upload(&self, data: &[u8]) -> Result<DeviceBuffer, GpuError> {
        let buf = self.alloc(data.len())?;
        self.write(&buf, 0, data)?;
        Ok(buf)
    }

    /// Copies `data` into `buf` at byte `offset` (after the stream's earlier work).
    pub fn write(&self, buf: &DeviceBuffer, offset: usize, data: &[u8]) -> Result<(), GpuError> {
        if offset + data.len() > buf.bytes {
            return Err(GpuError::Size {
                what: "device write",
                got: offset + data.len(),
                want: buf.bytes,
            });
        }
        let c = &self.inner;
        c.make_current()?;
        self.synchronize()?;
        // SAFETY: the range lies in the allocation (checked above); `data` is readable.
        c.api.check("cuMemcpyHtoD", unsafe {
            (c.api.memcpy_htod)(buf.at(offset), data.as_ptr().cast(), data.len())
        })?;
        Ok(())
    }

    /// Copies `out.len()` bytes from `buf` at byte `offset`, after the stream's work.
    pub fn read(&self, buf: &DeviceBuffer, offset: usize, out: &mut [u8]) -> Result<(), GpuError> {
        if offset + out.len() > buf.bytes {
            return Err(GpuError::Size {
                what: "device read",
                got: offset + out.len(),
                want: buf.bytes,
            });
        }
        let c = &self.inner;
        c.make_current()?;
        self.synchronize()?;
        // SAFETY: the range lies in the allocation (checked above); `out` is writable.
        c.api.check("cuMemcpyDtoH", unsafe {
            (c.api.memcpy_dtoh)(out.as_mut_ptr().cast(), buf.at(offset), out.len())
        })?;
        Ok(())
    }

    /// Copies `bytes` between device addresses (ordered after the stream's work).
    pub fn copy(&self, dst: CuDevicePtr, src: CuDevicePtr, bytes: usize) -> Result<(), GpuError> {
        let c = &self.inner;
        c.make_current()?;
        self.synchronize()?;
        // SAFETY: the caller passes addresses inside its own buffers.
        c.api.check("cuMemcpyDtoD", unsafe {
            (c.api.memcpy_dtod)(dst, src, bytes)
        })?;
        Ok(())
    }

    /// Queues `kernel` on the device's stream with `args` (in the kernel's parameter order).
    pub fn launch(&self, kernel: Kernel, shape: LaunchShape, args: &[Arg]) -> Result<(), GpuError> {
        let c = &self.inner;
        c.make_current()?;
        // Every argument in an 8-byte slot; CUDA reads each parameter's own size from its
        // pointer, and the low bytes of a little-endian slot hold the narrower value.
        let mut slots: Vec<u64> = args
            .iter()
            .map(|a| match *a {
                Arg::Ptr(p) => p,
                Arg::I32(v) => v as u32 as u64,
                Arg::F32(v) => v.to_bits() as u64,
            })
            .collect();
        let mut params: Vec<*mut c_void> = slots
            .iter_mut()
            .map(|s| (s as *mut u64).cast::<c_void>())
            .collect();
        let (g, b) = (shape.grid, shape.block);
        // SAFETY: `params` points at one live slot per kernel parameter, in order, for the
        // duration of the call (the driver copies them before returning).
        c.api.check("cuLaunchKernel", unsafe {
            (c.api.launch_kernel)(
                kernel.func,
                g.0,
                g.1,
                g.2,
                b.0,
                b.1,
                b.2,
                shape.shared_bytes,
                c.stream,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })?;
        Ok(())
    }

    /// Waits for the stream's work; a kernel fault surfaces here.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        let c = &self.inner;
        // SAFETY: the stream belongs to this context.
        c.api.check("cuStreamSynchronize", unsafe {
            (c.api.stream_synchronize)(c.stream)
        })?;
        Ok(())
    }
}

/// Loads one image, capturing the JIT's error log into the reason when it fails.
fn load_module(api: &'static Api, image: &ModuleImage) -> Result<CuModule, GpuUnavailable> {
    let mut bytes = image.bytes.clone();
    if !bytes.starts_with(b"\x7fELF") && bytes.last() != Some(&0) {
        bytes.push(0); // PTX text must be NUL-terminated
    }
    let mut error_log = vec![0u8; LOG_BYTES];
    let mut info_log = vec![0u8; LOG_BYTES];
    let mut options: [c_int; 4] = [
        JIT_ERROR_LOG_BUFFER,
        JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        JIT_INFO_LOG_BUFFER,
        JIT_INFO_LOG_BUFFER_SIZE_BYTES,
    ];
    // Sizes travel in the pointer-sized value slots, as cuda.h specifies.
    let mut values: [*mut c_void; 4] = [
        error_log.as_mut_ptr().cast(),
        LOG_BYTES as *mut c_void,
        info_log.as_mut_ptr().cast(),
        LOG_BYTES as *mut c_void,
    ];
    let mut module: CuModule = std::ptr::null_mut();
    // SAFETY: `bytes` is a complete image; the option arrays have 4 entries each and the log
    // buffers hold LOG_BYTES bytes, as their size options say.
    let code = unsafe {
        (api.module_load_data_ex)(
            &mut module,
            bytes.as_ptr().cast(),
            options.len() as c_uint,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    api.check("cuModuleLoadDataEx", code)
        .map_err(|failure| GpuUnavailable::Jit {
            module: image.name,
            failure,
            log: c_text(&error_log),
        })?;
    Ok(module)
}

/// The NUL-terminated text at the start of `buf`.
fn c_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
