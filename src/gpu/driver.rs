//! The CUDA driver API, opened at run time: `libcuda.so.1` (`nvcuda.dll` on Windows) is loaded
//! with `libloading`, never linked (the executable's dynamic section names only the C library)
//! and never unloaded (the handle is leaked, so function pointers stay valid for the process).
//! Owns the subset of entry points this program calls and the translation of a `CUresult` into
//! a [`CudaFailure`]; it does not own contexts, memory or kernels (see `device.rs`).

use super::error::{CudaFailure, GpuUnavailable};
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

/// The driver library's name for the platform's loader.
#[cfg(windows)]
pub const LIBRARY: &str = "nvcuda.dll";
/// The driver library's name for the platform's loader.
#[cfg(not(windows))]
pub const LIBRARY: &str = "libcuda.so.1";

pub type CuResult = c_int;
pub type CuDevice = c_int;
pub type CuContext = *mut c_void;
pub type CuModule = *mut c_void;
pub type CuFunction = *mut c_void;
pub type CuStream = *mut c_void;
pub type CuDevicePtr = u64;

pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_NO_DEVICE: CuResult = 100;
pub const ATTR_CC_MAJOR: c_int = 75;
pub const ATTR_CC_MINOR: c_int = 76;
/// JIT options of `cuModuleLoadDataEx`.
pub const JIT_INFO_LOG_BUFFER: c_int = 3;
pub const JIT_INFO_LOG_BUFFER_SIZE_BYTES: c_int = 4;
pub const JIT_ERROR_LOG_BUFFER: c_int = 5;
pub const JIT_ERROR_LOG_BUFFER_SIZE_BYTES: c_int = 6;

macro_rules! driver_api {
    ($( $field:ident = $symbol:literal ( $($arg:ty),* ) ;)*) => {
        /// Entry points of the driver library, resolved once.
        pub struct Api {
            $( pub $field: unsafe extern "C" fn($($arg),*) -> CuResult, )*
        }

        impl Api {
            /// Resolves every entry point in `lib`, or names the first one missing.
            fn resolve(lib: &'static Library) -> Result<Api, GpuUnavailable> {
                Ok(Api {
                    $( $field: {
                        // SAFETY: the symbol is the driver API function of this name, whose C
                        // signature is the one declared here (CUDA's cuda.h); the library is
                        // never unloaded, so the pointer stays valid.
                        let sym = unsafe {
                            lib.get::<unsafe extern "C" fn($($arg),*) -> CuResult>(
                                concat!($symbol, "\0").as_bytes(),
                            )
                        };
                        *sym.map_err(|_| GpuUnavailable::MissingSymbol {
                            library: LIBRARY,
                            symbol: $symbol,
                        })?
                    }, )*
                })
            }
        }
    };
}

driver_api! {
    init = "cuInit"(c_uint);
    driver_get_version = "cuDriverGetVersion"(*mut c_int);
    get_error_name = "cuGetErrorName"(CuResult, *mut *const c_char);
    device_get_count = "cuDeviceGetCount"(*mut c_int);
    device_get = "cuDeviceGet"(*mut CuDevice, c_int);
    device_get_name = "cuDeviceGetName"(*mut c_char, c_int, CuDevice);
    device_get_attribute = "cuDeviceGetAttribute"(*mut c_int, c_int, CuDevice);
    device_total_mem = "cuDeviceTotalMem_v2"(*mut usize, CuDevice);
    primary_ctx_retain = "cuDevicePrimaryCtxRetain"(*mut CuContext, CuDevice);
    primary_ctx_release = "cuDevicePrimaryCtxRelease_v2"(CuDevice);
    ctx_set_current = "cuCtxSetCurrent"(CuContext);
    ctx_synchronize = "cuCtxSynchronize"();
    module_load_data_ex = "cuModuleLoadDataEx"(
        *mut CuModule, *const c_void, c_uint, *mut c_int, *mut *mut c_void
    );
    module_get_function = "cuModuleGetFunction"(*mut CuFunction, CuModule, *const c_char);
    module_unload = "cuModuleUnload"(CuModule);
    mem_alloc = "cuMemAlloc_v2"(*mut CuDevicePtr, usize);
    mem_free = "cuMemFree_v2"(CuDevicePtr);
    memcpy_htod = "cuMemcpyHtoD_v2"(CuDevicePtr, *const c_void, usize);
    memcpy_dtoh = "cuMemcpyDtoH_v2"(*mut c_void, CuDevicePtr, usize);
    memcpy_dtod = "cuMemcpyDtoD_v2"(CuDevicePtr, CuDevicePtr, usize);
    stream_create = "cuStreamCreate"(*mut CuStream, c_uint);
    stream_destroy = "cuStreamDestroy_v2"(CuStream);
    stream_synchronize = "cuStreamSynchronize"(CuStream);
    launch_kernel = "cuLaunchKernel"(
        CuFunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CuStream,
        *mut *mut c_void, *mut *mut c_void
    );
}

impl Api {
    /// `Ok` for `CUDA_SUCCESS`, else the failure of `call` with the driver's name for `code`.
    pub fn check(&self, call: &'static str, code: CuResult) -> Result<(), CudaFailure> {
        if code == CUDA_SUCCESS {
            return Ok(());
        }
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName writes a pointer to a static string, or fails for unknown codes.
        let known = unsafe { (self.get_error_name)(code, &mut name) } == CUDA_SUCCESS;
        let name = if known && !name.is_null() {
            // SAFETY: the driver returned a NUL-terminated static string.
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        } else {
            "unknown CUDA error".to_string()
        };
        Err(CudaFailure { call, code, name })
    }
}

/// Opens the driver library by its loader name (`LD_LIBRARY_PATH` and the system paths are
/// searched, as for any library) and resolves the API; the library is never unloaded.
pub fn open() -> Result<&'static Api, GpuUnavailable> {
    if cfg!(target_os = "macos") {
        return Err(GpuUnavailable::UnsupportedPlatform);
    }
    // SAFETY: loading the NVIDIA driver runs its initialisers, which expect nothing of us.
    let lib = match unsafe { Library::new(LIBRARY) } {
        Ok(lib) => lib,
        Err(e) => return Err(load_failure(&e.to_string())),
    };
    let lib: &'static Library = Box::leak(Box::new(lib));
    Ok(Box::leak(Box::new(Api::resolve(lib)?)))
}

/// The loader's message for a library it could not open, as a reason: "not found" when the
/// file is absent, else the loader's own words.
fn load_failure(detail: &str) -> GpuUnavailable {
    if detail.contains("No such file")
        || detail.contains("cannot find")
        || detail.contains("(os error 126)")
    {
        GpuUnavailable::LibraryNotFound(LIBRARY)
    } else {
        GpuUnavailable::LibraryUnloadable {
            library: LIBRARY,
            detail: detail.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_library_is_not_found_and_others_keep_the_loaders_words() {
        let absent = "libcuda.so.1: cannot open shared object file: No such file or directory";
        assert_eq!(
            load_failure(absent),
            GpuUnavailable::LibraryNotFound(LIBRARY)
        );
        let bad = "libcuda.so.1: wrong ELF class: ELFCLASS32";
        assert_eq!(
            load_failure(bad).to_string(),
            format!("{LIBRARY} cannot be loaded: {bad}")
        );
    }
}
