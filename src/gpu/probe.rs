//! Finding the GPU: the `--gpu` choice, `CUDA_VISIBLE_DEVICES`, the driver library, `cuInit`,
//! the device `--main-gpu` names, and what it is (name, compute capability, driver, memory).
//! Owns [`GpuOptions`], [`GpuInfo`], [`probe`] and the start line's wording; it creates no
//! context and loads no kernel (see `device.rs`).

use super::driver::{self, Api, CuDevice, ATTR_CC_MAJOR, ATTR_CC_MINOR, CUDA_ERROR_NO_DEVICE};
use super::error::GpuUnavailable;
use std::ffi::{c_char, c_int, CStr};
use std::fmt;
use std::sync::OnceLock;

/// `--gpu`: whether to look for a GPU, and whether not finding one is an error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GpuMode {
    /// Use an NVIDIA GPU when one works; otherwise run on the CPU and say why.
    #[default]
    Auto,
    /// Use an NVIDIA GPU; any failure to is fatal.
    Nvidia,
    /// Never look for a GPU.
    Disable,
}

/// What the command line asks of the GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuOptions {
    pub mode: GpuMode,
    /// `--main-gpu`: the index among the visible devices.
    pub main_gpu: usize,
    /// `--recompile`: build the kernels for this exact GPU when a compiler is present.
    pub recompile: bool,
}

/// The device a probe found.
#[derive(Clone)]
pub struct GpuInfo {
    /// Index among the visible devices (`--main-gpu`) and how many there are.
    pub index: usize,
    pub count: usize,
    pub name: String,
    /// Compute capability (major, minor).
    pub cc: (i32, i32),
    /// `cuDriverGetVersion`: the CUDA version the driver implements (12080 is 12.8).
    pub cuda_version: i32,
    /// The NVIDIA kernel module's version (`580.65.06`), when `/proc` says.
    pub kernel_driver: Option<String>,
    pub total_mem: usize,
    pub(crate) api: &'static Api,
    pub(crate) device: CuDevice,
}

impl fmt::Debug for GpuInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GpuInfo")
            .field("index", &self.index)
            .field("name", &self.name)
            .field("cc", &self.cc)
            .field("cuda_version", &self.cuda_version)
            .field("kernel_driver", &self.kernel_driver)
            .finish()
    }
}

impl fmt::Display for GpuInfo {
    /// `NVIDIA H100 80GB HBM3 (cc 9.0, driver 580)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = self.cc;
        write!(f, "{} (cc {major}.{minor}, ", self.name)?;
        match &self.kernel_driver {
            Some(v) => write!(f, "driver {})", v.split('.').next().unwrap_or(v)),
            None => write!(f, "CUDA {})", cuda_version_text(self.cuda_version)),
        }
    }
}

/// `12080` as `12.8`.
pub fn cuda_version_text(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// The start line when `n_device` of `n_layer` blocks run on `info`.
pub fn line_on_gpu(info: &GpuInfo, n_device: usize, n_layer: usize) -> String {
    format!("gpu: {info}, {n_device}/{n_layer} layers")
}

/// The start line when everything runs on the CPU, and why.
pub fn line_on_cpu(reason: &dyn fmt::Display) -> String {
    format!("gpu: none ({reason}); running on CPU")
}

/// Looks for the GPU `opts` asks for. Panic-free: every missing piece is a reason.
pub fn probe(opts: &GpuOptions) -> Result<GpuInfo, GpuUnavailable> {
    if opts.mode == GpuMode::Disable {
        return Err(GpuUnavailable::Disabled);
    }
    let visible = std::env::var_os("CUDA_VISIBLE_DEVICES");
    if visible
        .as_ref()
        .is_some_and(|v| v.to_string_lossy().trim().is_empty())
    {
        return Err(GpuUnavailable::NoVisibleDevice);
    }
    let api = driver_api()?;
    // SAFETY: cuInit takes flags, which must be 0.
    let code = unsafe { (api.init)(0) };
    if code == CUDA_ERROR_NO_DEVICE {
        return Err(GpuUnavailable::NoDevice);
    }
    api.check("cuInit", code)?;
    let mut count: c_int = 0;
    // SAFETY: writes one int.
    api.check("cuDeviceGetCount", unsafe {
        (api.device_get_count)(&mut count)
    })?;
    let count = usize::try_from(count).unwrap_or(0);
    if count == 0 {
        return Err(GpuUnavailable::NoDevice);
    }
    if opts.main_gpu >= count {
        return Err(GpuUnavailable::NoSuchDevice {
            index: opts.main_gpu,
            count,
        });
    }
    let mut device: CuDevice = 0;
    // SAFETY: writes one device handle; the index is below the count.
    api.check("cuDeviceGet", unsafe {
        (api.device_get)(&mut device, opts.main_gpu as c_int)
    })?;
    let mut name = [0 as c_char; 256];
    // SAFETY: the buffer holds 256 bytes and its length is passed.
    api.check("cuDeviceGetName", unsafe {
        (api.device_get_name)(name.as_mut_ptr(), name.len() as c_int, device)
    })?;
    // The driver NUL-terminates within the length; make sure of it before reading.
    name[255] = 0;
    // SAFETY: NUL-terminated above.
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }
        .to_string_lossy()
        .trim()
        .to_string();
    let attribute = |attr: c_int, what: &'static str| -> Result<i32, GpuUnavailable> {
        let mut v: c_int = 0;
        // SAFETY: writes one int.
        api.check(what, unsafe {
            (api.device_get_attribute)(&mut v, attr, device)
        })?;
        Ok(v)
    };
    let cc = (
        attribute(ATTR_CC_MAJOR, "cuDeviceGetAttribute")?,
        attribute(ATTR_CC_MINOR, "cuDeviceGetAttribute")?,
    );
    let mut cuda_version: c_int = 0;
    // SAFETY: writes one int.
    api.check("cuDriverGetVersion", unsafe {
        (api.driver_get_version)(&mut cuda_version)
    })?;
    let mut total_mem = 0usize;
    // SAFETY: writes one size_t.
    api.check("cuDeviceTotalMem", unsafe {
        (api.device_total_mem)(&mut total_mem, device)
    })?;
    Ok(GpuInfo {
        index: opts.main_gpu,
        count,
        name,
        cc,
        cuda_version,
        kernel_driver: kernel_driver_version(),
        total_mem,
        api,
        device,
    })
}

/// The driver library, opened on first use and kept for the process (one result, so a failed
/// load is reported the same way every time).
fn driver_api() -> Result<&'static Api, GpuUnavailable> {
    static API: OnceLock<Result<&'static Api, GpuUnavailable>> = OnceLock::new();
    API.get_or_init(driver::open).clone()
}

/// The NVIDIA kernel module's version from `/proc/driver/nvidia/version`.
fn kernel_driver_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    parse_kernel_driver(&text)
}

/// `NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 ...` -> `580.65.06`.
fn parse_kernel_driver(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version"))?;
    let after = line.split("Kernel Module").nth(1)?;
    after
        .split_whitespace()
        .find(|w| w.contains('.') && w.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernel_module_version() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 06:54:38 UTC 2025\nGCC version:  gcc 12\n";
        assert_eq!(parse_kernel_driver(text).as_deref(), Some("580.65.06"));
        assert_eq!(parse_kernel_driver("GCC version: 12\n"), None);
        let open =
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n";
        assert_eq!(parse_kernel_driver(open).as_deref(), Some("570.86.15"));
    }

    #[test]
    fn cuda_versions_read_as_major_minor() {
        assert_eq!(cuda_version_text(12080), "12.8");
        assert_eq!(cuda_version_text(13000), "13.0");
    }

    #[test]
    fn disable_and_an_empty_device_list_need_no_driver() {
        let off = GpuOptions {
            mode: GpuMode::Disable,
            ..GpuOptions::default()
        };
        assert_eq!(probe(&off).unwrap_err(), GpuUnavailable::Disabled);
        assert_eq!(
            line_on_cpu(&GpuUnavailable::Disabled),
            "gpu: none (--gpu disable); running on CPU"
        );
    }
}
