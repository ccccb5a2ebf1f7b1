//! The GPU flags: `--gpu auto|nvidia|disable` (llamafile's: naming nvidia makes any failure to
//! use it fatal), `--main-gpu` / `-mg` (llama.cpp's: which visible device) and `--recompile`
//! (llamafile's: build the kernels for this exact GPU when a compiler is present). `-ngl` lives
//! with the model flags. Validated into [`GpuOptions`].

use crate::gpu::{GpuMode, GpuOptions};
use clap::Args;

/// GPU selection flags.
#[derive(Args, Debug, Clone, Default)]
pub struct GpuArgs {
    /// Which GPU support to use: auto (an NVIDIA GPU when one works, else the CPU, saying
    /// why), nvidia (fail if it cannot be used), disable.
    #[arg(long = "gpu", value_enum, default_value_t = GpuMode::Auto, value_name = "auto|nvidia|disable")]
    pub gpu: GpuMode,

    /// The GPU to use, as an index among the visible devices (CUDA_VISIBLE_DEVICES applies
    /// first).
    #[arg(
        long = "main-gpu",
        value_name = "INDEX",
        env = "LLAMA_ARG_MAIN_GPU",
        allow_negative_numbers = true
    )]
    pub main_gpu: Option<i64>,

    /// Build the GPU kernels for this exact GPU with the host's nvcc or NVRTC, cached under
    /// $XDG_CACHE_HOME/llamafile-rs/gpu (else the embedded PTX is JIT-compiled by the driver).
    #[arg(long = "recompile")]
    pub recompile: bool,
}

impl GpuArgs {
    /// The options, or why a value is out of range.
    pub fn options(&self) -> Result<GpuOptions, String> {
        let main_gpu = match self.main_gpu {
            None => 0,
            Some(i) => usize::try_from(i)
                .map_err(|_| format!("--main-gpu {i}: expected a device index, 0 or more"))?,
        };
        Ok(GpuOptions {
            mode: self.gpu,
            main_gpu,
            recompile: self.recompile,
        })
    }
}
