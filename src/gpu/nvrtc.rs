//! NVRTC on the host, for `--recompile`: `libnvrtc.so` opened at run time when the machine has
//! one (a CUDA toolkit, or the pip package's on `LD_LIBRARY_PATH`), compiling a kernel module
//! to a cubin for one exact GPU. Never linked, never unloaded; a missing library or symbol is
//! `None` or an error, not a crash.

use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CString};

type Prog = *mut c_void;

/// The NVRTC entry points used.
pub struct Nvrtc {
    create: unsafe extern "C" fn(
        *mut Prog,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int,
    compile: unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int,
    log_size: unsafe extern "C" fn(Prog, *mut usize) -> c_int,
    log: unsafe extern "C" fn(Prog, *mut c_char) -> c_int,
    cubin_size: unsafe extern "C" fn(Prog, *mut usize) -> c_int,
    cubin: unsafe extern "C" fn(Prog, *mut c_char) -> c_int,
    destroy: unsafe extern "C" fn(*mut Prog) -> c_int,
    /// Where it was found, for messages.
    pub library: &'static str,
}

/// The names tried, newest first.
const CANDIDATES: [&str; 4] = [
    "libnvrtc.so",
    "libnvrtc.so.13",
    "libnvrtc.so.12",
    "libnvrtc.so.11.2",
];

impl Nvrtc {
    /// The first NVRTC library the loader finds that has every entry point, if any.
    pub fn find() -> Option<Nvrtc> {
        if cfg!(windows) {
            return None;
        }
        CANDIDATES.iter().find_map(|name| {
            // SAFETY: loading NVRTC runs no initialiser with expectations of us.
            let lib = unsafe { Library::new(name) }.ok()?;
            let lib: &'static Library = Box::leak(Box::new(lib));
            Nvrtc::resolve(lib, name)
        })
    }

    /// NVRTC from an explicit path (tests, and users who name it).
    pub fn open(path: &std::path::Path) -> Option<Nvrtc> {
        // SAFETY: as in `find`.
        let lib = unsafe { Library::new(path) }.ok()?;
        let lib: &'static Library = Box::leak(Box::new(lib));
        Nvrtc::resolve(lib, "libnvrtc.so")
    }

    fn resolve(lib: &'static Library, library: &'static str) -> Option<Nvrtc> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is NVRTC's function of this name with the C signature
                // declared in the field's type (nvrtc.h); the library is never unloaded.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.ok()?
            };
        }
        Some(Nvrtc {
            create: sym!("nvrtcCreateProgram"),
            compile: sym!("nvrtcCompileProgram"),
            log_size: sym!("nvrtcGetProgramLogSize"),
            log: sym!("nvrtcGetProgramLog"),
            cubin_size: sym!("nvrtcGetCUBINSize"),
            cubin: sym!("nvrtcGetCUBIN"),
            destroy: sym!("nvrtcDestroyProgram"),
            library,
        })
    }

    /// Compiles `source` (named `name`, including `headers`) with `options`; the cubin, or the
    /// compiler's log.
    pub fn compile(
        &self,
        name: &str,
        source: &str,
        headers: &[(&str, &str)],
        options: &[String],
    ) -> Result<Vec<u8>, String> {
        let cstr = |s: &str| CString::new(s).map_err(|_| format!("{name}: a NUL in the text"));
        let src = cstr(source)?;
        let cname = cstr(name)?;
        let hdr_src: Vec<CString> = headers
            .iter()
            .map(|h| cstr(h.1))
            .collect::<Result<_, _>>()?;
        let hdr_names: Vec<CString> = headers
            .iter()
            .map(|h| cstr(h.0))
            .collect::<Result<_, _>>()?;
        let opts: Vec<CString> = options.iter().map(|o| cstr(o)).collect::<Result<_, _>>()?;
        let hdr_src_p: Vec<*const c_char> = hdr_src.iter().map(|s| s.as_ptr()).collect();
        let hdr_names_p: Vec<*const c_char> = hdr_names.iter().map(|s| s.as_ptr()).collect();
        let opts_p: Vec<*const c_char> = opts.iter().map(|s| s.as_ptr()).collect();
        let mut prog: Prog = std::ptr::null_mut();
        // SAFETY: every pointer is a live NUL-terminated string; the arrays have the counts
        // passed.
        let status = unsafe {
            (self.create)(
                &mut prog,
                src.as_ptr(),
                cname.as_ptr(),
                headers.len() as c_int,
                hdr_src_p.as_ptr(),
                hdr_names_p.as_ptr(),
            )
        };
        if status != 0 {
            return Err(format!("nvrtcCreateProgram failed ({status})"));
        }
        // SAFETY: `prog` was created above; buffers are sized by the sizes NVRTC reports; the
        // program is destroyed once, at the end.
        unsafe {
            let status = (self.compile)(prog, opts_p.len() as c_int, opts_p.as_ptr());
            let result = if status != 0 {
                let mut size = 0usize;
                (self.log_size)(prog, &mut size);
                let mut log = vec![0u8; size.max(1)];
                (self.log)(prog, log.as_mut_ptr().cast());
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                Err(String::from_utf8_lossy(&log[..end]).trim().to_string())
            } else {
                let mut size = 0usize;
                if (self.cubin_size)(prog, &mut size) != 0 || size == 0 {
                    Err("NVRTC made no cubin".to_string())
                } else {
                    let mut out = vec![0u8; size];
                    if (self.cubin)(prog, out.as_mut_ptr().cast()) != 0 {
                        Err("nvrtcGetCUBIN failed".to_string())
                    } else {
                        Ok(out)
                    }
                }
            };
            (self.destroy)(&mut prog);
            result
        }
    }
}
