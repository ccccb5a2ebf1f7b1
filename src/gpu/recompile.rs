//! `--recompile`: kernels built for the exact GPU in front of us, as llamafile does, when the
//! host has a compiler (NVRTC's library, or `nvcc`), kept in a cache under
//! `$XDG_CACHE_HOME/llamafile-rs/gpu/` (else `~/.cache/...`) keyed by the kernels' source hash,
//! the driver's versions and the compute capability, so a new driver, a new GPU or new kernels
//! never reuse a stale build. Files are written atomically (`bundle::output::Output`: a
//! temporary beside the target, fsynced, renamed). Anything that goes wrong (no compiler, a
//! compile error, no home, a read-only cache) falls back to the embedded PTX with a message.
//! Owns the key, the cache layout and the choice of images; not the loading (`device.rs`).

use super::device::ModuleImage;
use super::kernels::{KernelModule, COMPILE_OPTIONS, HEADERS, MODULES};
use super::nvrtc::Nvrtc;
use super::probe::GpuInfo;
use crate::bundle::output::Output;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why the recompiled kernels cannot be used (the message after "--recompile: ").
#[derive(Debug, thiserror::Error)]
pub enum RecompileError {
    #[error("neither NVRTC (libnvrtc.so) nor nvcc found")]
    NoCompiler,
    #[error("no cache directory: neither XDG_CACHE_HOME nor HOME is set")]
    NoHome,
    #[error("cannot use the kernel cache {path}: {error}")]
    Cache { path: PathBuf, error: io::Error },
    #[error("{compiler} cannot compile {module}.cu for sm_{cc}: {log}")]
    Compile {
        compiler: String,
        module: &'static str,
        cc: String,
        log: String,
    },
}

/// What identifies one build of the kernels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheKey {
    /// FNV-1a of every module's and header's name and text and the compile options.
    pub source_hash: u64,
    /// `cuDriverGetVersion`.
    pub cuda_version: i32,
    /// The kernel module's version, when known.
    pub kernel_driver: Option<String>,
    pub cc: (i32, i32),
}

impl CacheKey {
    /// The key of the embedded kernels for `info`'s GPU and driver.
    pub fn for_gpu(info: &GpuInfo) -> CacheKey {
        CacheKey {
            source_hash: source_hash(MODULES, HEADERS),
            cuda_version: info.cuda_version,
            kernel_driver: info.kernel_driver.clone(),
            cc: info.cc,
        }
    }

    /// The cache directory's name: `src-HASH-cuda12080-drv580.65.06-sm90`.
    pub fn dir_name(&self) -> String {
        let drv = self
            .kernel_driver
            .as_deref()
            .map(|v| format!("-drv{v}"))
            .unwrap_or_default();
        format!(
            "src-{:016x}-cuda{}{drv}-sm{}",
            self.source_hash,
            self.cuda_version,
            self.arch()
        )
    }

    /// `90` for compute capability 9.0.
    fn arch(&self) -> String {
        format!("{}{}", self.cc.0, self.cc.1)
    }
}

/// FNV-1a (64-bit) over every module's and header's name and text, and the options.
pub fn source_hash(modules: &[KernelModule], headers: &[(&str, &str)]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for &b in bytes.iter().chain(&[0u8]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for m in modules {
        feed(m.name.as_bytes());
        feed(m.source.as_bytes());
    }
    for (name, text) in headers {
        feed(name.as_bytes());
        feed(text.as_bytes());
    }
    for o in COMPILE_OPTIONS {
        feed(o.as_bytes());
    }
    h
}

/// `$XDG_CACHE_HOME/llamafile-rs/gpu` (an absolute, non-empty value), else
/// `$HOME/.cache/llamafile-rs/gpu`; `var` reads the environment.
pub fn cache_root(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let xdg = var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let base = xdg.or_else(|| {
        var("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".cache"))
    })?;
    Some(base.join("llamafile-rs").join("gpu"))
}

/// The images to load for `info`: the embedded PTX, or with `recompile` a build for this GPU
/// (from the cache, or compiled and cached now). The message says what happened, when there is
/// something to say.
pub fn kernel_images(info: &GpuInfo, recompile: bool) -> (Vec<ModuleImage>, Option<String>) {
    if !recompile {
        return (embedded(), None);
    }
    let key = CacheKey::for_gpu(info);
    let root = cache_root(|v| std::env::var_os(v));
    match recompiled(root.as_deref(), &key, &find_compiler) {
        Ok((images, note)) => (images, Some(note)),
        Err(e) => (
            embedded(),
            Some(format!("gpu: --recompile: {e}; using the embedded PTX")),
        ),
    }
}

/// The embedded PTX of every module.
pub fn embedded() -> Vec<ModuleImage> {
    MODULES
        .iter()
        .map(|m| ModuleImage {
            name: m.name,
            bytes: m.ptx.as_bytes().to_vec(),
        })
        .collect()
}

/// A compiler of one module for one architecture (`90`), returning a cubin.
pub trait Compiler {
    fn name(&self) -> String;
    fn compile(&self, module: &KernelModule, arch: &str) -> Result<Vec<u8>, String>;
}

/// Cached cubins under `root` for `key`, or compiled now with `find`'s compiler and cached.
fn recompiled(
    root: Option<&Path>,
    key: &CacheKey,
    find: &dyn Fn() -> Option<Box<dyn Compiler>>,
) -> Result<(Vec<ModuleImage>, String), RecompileError> {
    let root = root.ok_or(RecompileError::NoHome)?;
    let dir = root.join(key.dir_name());
    if let Some(images) = read_cached(&dir) {
        return Ok((
            images,
            format!("gpu: kernels for sm_{} from {}", key.arch(), dir.display()),
        ));
    }
    let cache_error = |error| RecompileError::Cache {
        path: dir.clone(),
        error,
    };
    std::fs::create_dir_all(&dir).map_err(cache_error)?;
    let compiler = find().ok_or(RecompileError::NoCompiler)?;
    let mut images = Vec::new();
    for m in MODULES {
        let cubin = compiler
            .compile(m, &key.arch())
            .map_err(|log| RecompileError::Compile {
                compiler: compiler.name(),
                module: m.name,
                cc: key.arch(),
                log: log.lines().next().unwrap_or("").to_string(),
            })?;
        images.push(ModuleImage {
            name: m.name,
            bytes: cubin,
        });
    }
    for image in &images {
        write_atomically(&dir.join(format!("{}.cubin", image.name)), &image.bytes)
            .map_err(cache_error)?;
    }
    Ok((
        images,
        format!(
            "gpu: kernels compiled for sm_{} with {} into {}",
            key.arch(),
            compiler.name(),
            dir.display()
        ),
    ))
}

/// Every module's cubin from `dir`, if all are there.
fn read_cached(dir: &Path) -> Option<Vec<ModuleImage>> {
    MODULES
        .iter()
        .map(|m| {
            let bytes = std::fs::read(dir.join(format!("{}.cubin", m.name))).ok()?;
            bytes.starts_with(b"\x7fELF").then_some(ModuleImage {
                name: m.name,
                bytes,
            })
        })
        .collect()
}

/// Writes `bytes` to `path` so that readers see the old file or the whole new one, never part.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut out = Output::create(path)?;
    out.write(bytes)?;
    out.commit(None)
}

/// NVRTC's library when the loader finds one, else `nvcc` on `PATH` or in `CUDA_PATH`.
fn find_compiler() -> Option<Box<dyn Compiler>> {
    if let Some(n) = Nvrtc::find() {
        return Some(Box::new(n));
    }
    find_nvcc().map(|nvcc| Box::new(Nvcc { nvcc }) as Box<dyn Compiler>)
}

impl Compiler for Nvrtc {
    fn name(&self) -> String {
        format!("NVRTC ({})", self.library)
    }

    fn compile(&self, module: &KernelModule, arch: &str) -> Result<Vec<u8>, String> {
        let mut options = vec![format!("--gpu-architecture=sm_{arch}")];
        options.extend(COMPILE_OPTIONS.iter().map(|o| o.to_string()));
        Nvrtc::compile(
            self,
            &format!("{}.cu", module.name),
            module.source,
            HEADERS,
            &options,
        )
    }
}

/// The `nvcc` of a CUDA toolkit.
struct Nvcc {
    nvcc: PathBuf,
}

fn find_nvcc() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for var in ["CUDA_PATH", "CUDA_HOME"] {
        if let Some(p) = std::env::var_os(var) {
            dirs.push(PathBuf::from(p).join("bin"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/bin"));
    dirs.into_iter()
        .map(|d| d.join("nvcc"))
        .find(|p| p.is_file())
}

impl Compiler for Nvcc {
    fn name(&self) -> String {
        self.nvcc.display().to_string()
    }

    fn compile(&self, module: &KernelModule, arch: &str) -> Result<Vec<u8>, String> {
        let dir = std::env::temp_dir().join(format!(
            "llamafile-gpu-{}-{}",
            std::process::id(),
            module.name
        ));
        let result = (|| {
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            for (name, text) in HEADERS {
                std::fs::write(dir.join(name), text).map_err(|e| e.to_string())?;
            }
            let src = dir.join(format!("{}.cu", module.name));
            std::fs::write(&src, module.source).map_err(|e| e.to_string())?;
            let out = dir.join(format!("{}.cubin", module.name));
            let run = Command::new(&self.nvcc)
                .arg("--cubin")
                .arg(format!("-arch=sm_{arch}"))
                .args(["-std=c++17", "--fmad=true", "-o"])
                .arg(&out)
                .arg(&src)
                .output()
                .map_err(|e| e.to_string())?;
            if !run.status.success() {
                return Err(String::from_utf8_lossy(&run.stderr).trim().to_string());
            }
            std::fs::read(&out).map_err(|e| e.to_string())
        })();
        let _ = std::fs::remove_dir_all(&dir);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> CacheKey {
        CacheKey {
            source_hash: source_hash(MODULES, HEADERS),
            cuda_version: 12080,
            kernel_driver: Some("580.65.06".into()),
            cc: (9, 0),
        }
    }

    #[test]
    fn the_key_changes_with_sources_driver_and_gpu() {
        let base = key();
        assert_eq!(
            base.dir_name(),
            format!("src-{:016x}-cuda12080-drv580.65.06-sm90", base.source_hash)
        );
        let mut names = vec![base.dir_name()];
        names.push(
            CacheKey {
                cuda_version: 12090,
                ..key()
            }
            .dir_name(),
        );
        names.push(
            CacheKey {
                kernel_driver: Some("580.82.07".into()),
                ..key()
            }
            .dir_name(),
        );
        names.push(
            CacheKey {
                kernel_driver: None,
                ..key()
            }
            .dir_name(),
        );
        names.push(
            CacheKey {
                cc: (8, 9),
                ..key()
            }
            .dir_name(),
        );
        let mut edited = MODULES.to_vec();
        edited[0].source = "// one changed byte";
        names.push(
            CacheKey {
                source_hash: source_hash(&edited, HEADERS),
                ..key()
            }
            .dir_name(),
        );
        let headers = [(HEADERS[0].0, "changed"), HEADERS[1]];
        names.push(
            CacheKey {
                source_hash: source_hash(MODULES, &headers),
                ..key()
            }
            .dir_name(),
        );
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        // Deterministic: the same inputs give the same key.
        assert_eq!(key(), key());
    }

    #[test]
    fn the_cache_root_follows_xdg_then_home() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |v: &str| pairs.iter().find(|p| p.0 == v).map(|p| OsString::from(p.1))
        };
        assert_eq!(
            cache_root(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
            Some(PathBuf::from("/x/llamafile-rs/gpu"))
        );
        // A relative or empty XDG_CACHE_HOME is ignored, as the XDG spec says.
        assert_eq!(
            cache_root(env(&[("XDG_CACHE_HOME", "rel"), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.cache/llamafile-rs/gpu"))
        );
        assert_eq!(
            cache_root(env(&[("XDG_CACHE_HOME", ""), ("HOME", "/h")])),
            Some(PathBuf::from("/h/.cache/llamafile-rs/gpu"))
        );
        assert_eq!(cache_root(env(&[])), None);
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("llamafile-recompile-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn atomic_write_replaces_whole_and_leaves_no_temporary() {
        let d = temp_dir("atomic");
        let target = d.join("a.cubin");
        write_atomically(&target, b"old").unwrap();
        write_atomically(&target, b"\x7fELF new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"\x7fELF new");
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![OsString::from("a.cubin")]);
        // A directory that cannot exist (a file in the way) is an error, not a panic.
        assert!(write_atomically(&target.join("below"), b"x").is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A compiler that "compiles" each module to an ELF-looking blob naming it and the arch,
    /// counting its calls.
    struct Fake(std::cell::Cell<usize>);

    impl Compiler for Fake {
        fn name(&self) -> String {
            "fake".into()
        }
        fn compile(&self, m: &KernelModule, arch: &str) -> Result<Vec<u8>, String> {
            self.0.set(self.0.get() + 1);
            Ok(format!("\x7fELF {} sm_{arch}", m.name).into_bytes())
        }
    }

    #[test]
    fn compiles_once_then_reads_the_cache_and_falls_back_without_a_home() {
        let d = temp_dir("cache");
        let calls = std::rc::Rc::new(std::cell::Cell::new(0));
        let c2 = calls.clone();
        let find = move || -> Option<Box<dyn Compiler>> {
            c2.set(c2.get() + 1);
            Some(Box::new(Fake(std::cell::Cell::new(0))))
        };
        let (images, note) = recompiled(Some(&d), &key(), &find).unwrap();
        assert_eq!(images.len(), MODULES.len());
        assert!(note.contains("compiled for sm_90 with fake"), "{note}");
        assert_eq!(
            images[0].bytes,
            format!("\x7fELF {} sm_90", MODULES[0].name).into_bytes()
        );
        let (again, note) = recompiled(Some(&d), &key(), &find).unwrap();
        assert!(note.contains("from"), "{note}");
        assert_eq!(calls.get(), 1, "the second run compiled again");
        assert_eq!(again[3].bytes, images[3].bytes);
        // Another GPU is another key: compiled again.
        recompiled(
            Some(&d),
            &CacheKey {
                cc: (8, 6),
                ..key()
            },
            &find,
        )
        .unwrap();
        assert_eq!(calls.get(), 2);

        assert!(matches!(
            recompiled(None, &key(), &find),
            Err(RecompileError::NoHome)
        ));
        let blocked = d.join("file");
        std::fs::write(&blocked, b"").unwrap();
        let err = recompiled(Some(&blocked), &key(), &find).unwrap_err();
        assert!(matches!(err, RecompileError::Cache { .. }), "{err}");
        let none = || -> Option<Box<dyn Compiler>> { None };
        let err = recompiled(Some(&d.join("fresh")), &key(), &none).unwrap_err();
        assert_eq!(
            err.to_string(),
            "neither NVRTC (libnvrtc.so) nor nvcc found"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_compile_error_names_the_compiler_module_and_arch() {
        struct Broken;
        impl Compiler for Broken {
            fn name(&self) -> String {
                "nvcc".into()
            }
            fn compile(&self, _: &KernelModule, _: &str) -> Result<Vec<u8>, String> {
                Err("nvcc fatal: Unsupported gpu architecture 'sm_120'\nmore".into())
            }
        }
        let d = temp_dir("broken");
        let find = || -> Option<Box<dyn Compiler>> { Some(Box::new(Broken)) };
        let err = recompiled(
            Some(&d),
            &CacheKey {
                cc: (12, 0),
                ..key()
            },
            &find,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "nvcc cannot compile {}.cu for sm_120: nvcc fatal: Unsupported gpu architecture 'sm_120'",
                MODULES[0].name
            )
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}
