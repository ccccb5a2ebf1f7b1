//! The GPU runtime: CUDA kernels (`gpu-src/`, embedded as source and as compute_75 PTX) and the
//! host side that finds a GPU and runs them, with no CUDA toolkit needed by the user and nothing
//! linked: the driver library is opened at run time, and every way this can fail is a typed
//! reason ([`GpuUnavailable`]) that becomes one line, never a panic.
//!
//! ```text
//! probe (driver.rs, probe.rs)  ->  kernel images (kernels.rs, recompile.rs, nvrtc.rs)
//!                              ->  Device::open: context, JIT, memory, launches (device.rs)
//! ```
//!
//! [`start`] is the front door: it probes as the `--gpu` options say and gives the device (or
//! the reason there is none) and the start line's wording. Not here: which layers run where
//! (`-ngl`, the backend seam) and what the kernels compute (each `.cu` file's header).

pub mod backend;
pub mod device;
pub mod driver;
pub mod encoder;
pub mod error;
pub mod kernels;
pub mod nvrtc;
pub mod probe;
pub mod recompile;
pub mod startup;

pub use device::{Arg, Device, DeviceBuffer, Kernel, LaunchShape, ModuleImage};
pub use error::{CudaFailure, GpuError, GpuUnavailable};
pub use probe::{line_on_cpu, line_on_gpu, probe, GpuInfo, GpuMode, GpuOptions};

/// A GPU found and opened, with its kernels loaded, and what to tell the user about it (a
/// `--recompile` outcome) besides the start line.
pub struct Opened {
    pub device: Device,
    pub notes: Vec<String>,
}

/// Probes the GPU `opts` asks for and loads the kernels into it: the recompiled ones when
/// `--recompile` built or found them (falling back to the embedded PTX, with a note, if the
/// driver refuses them), else the embedded PTX.
pub fn start(opts: &GpuOptions) -> Result<Opened, GpuUnavailable> {
    let info = probe(opts)?;
    let (images, note) = recompile::kernel_images(&info, opts.recompile);
    let mut notes: Vec<String> = note.into_iter().collect();
    let recompiled = images.iter().any(|i| i.bytes.starts_with(b"\x7fELF"));
    let device = match Device::open(&info, &images) {
        Err(e) if recompiled => {
            notes.push(format!(
                "gpu: the recompiled kernels do not load ({e}); using the embedded PTX"
            ));
            Device::open(&info, &recompile::embedded())?
        }
        other => other?,
    };
    Ok(Opened { device, notes })
}
