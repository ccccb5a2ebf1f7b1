//! What a run says and decides about the GPU at start: whether to look for one (`-ngl` asks for
//! layers, or `--gpu nvidia`), the one start line ("gpu: NAME (cc X.Y, driver N), K/L layers"
//! or "gpu: none (REASON); running on CPU"), and when not finding one is fatal (`--gpu nvidia`:
//! one line, non-zero exit). Probing happens before the model loads, so a fatal failure costs
//! nothing; the line is printed once the layer count is known.

use super::{start, GpuMode, GpuOptions, GpuUnavailable, Opened};

/// The outcome of the start-up probe.
pub enum GpuStart {
    /// Nothing asked for a GPU (no `-ngl`, or `-ngl 0`, and not `--gpu nvidia`): say nothing.
    NotAsked,
    /// A GPU was asked for and none can be used, for this reason: the run is on the CPU.
    Unavailable(GpuUnavailable),
    /// A GPU was found and its kernels loaded.
    Found(Opened),
}

/// Whether `-ngl` asks for any layers on the GPU (`auto`, `all`, a negative or positive
/// number; not `0`).
pub fn ngl_asks_for_layers(ngl: Option<&str>) -> bool {
    ngl.is_some_and(|n| n.trim() != "0")
}

/// Probes as `opts` says when `-ngl` (its raw value `ngl`) or `--gpu nvidia` asks for a GPU.
/// With `--gpu nvidia`, no usable GPU is an error: the reason, as one line.
pub fn probe_for_run(opts: &GpuOptions, ngl: Option<&str>) -> Result<GpuStart, String> {
    let asked =
        opts.mode == GpuMode::Nvidia || (opts.mode == GpuMode::Auto && ngl_asks_for_layers(ngl));
    if !asked {
        return Ok(match (opts.mode, ngl_asks_for_layers(ngl)) {
            (GpuMode::Disable, true) => GpuStart::Unavailable(GpuUnavailable::Disabled),
            _ => GpuStart::NotAsked,
        });
    }
    match start(opts) {
        Ok(opened) => Ok(GpuStart::Found(opened)),
        Err(reason) if opts.mode == GpuMode::Nvidia => Err(format!("--gpu nvidia: {reason}")),
        Err(reason) => Ok(GpuStart::Unavailable(reason)),
    }
}

impl GpuStart {
    /// The lines to print for a model of `n_layer` blocks of which `n_device` run on the GPU
    /// (notes from `--recompile` first, then the start line).
    pub fn lines(&self, n_device: usize, n_layer: usize) -> Vec<String> {
        match self {
            GpuStart::NotAsked => Vec::new(),
            GpuStart::Unavailable(reason) => vec![super::line_on_cpu(reason)],
            GpuStart::Found(opened) => {
                let mut lines = opened.notes.clone();
                lines.push(super::line_on_gpu(opened.device.info(), n_device, n_layer));
                lines
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_layers_or_nvidia_ask_for_a_gpu() {
        assert!(!ngl_asks_for_layers(None));
        assert!(!ngl_asks_for_layers(Some("0")));
        for v in ["1", "99", "999", "-1", "auto", "all"] {
            assert!(ngl_asks_for_layers(Some(v)), "{v}");
        }
        let auto = GpuOptions::default();
        assert!(matches!(probe_for_run(&auto, None), Ok(GpuStart::NotAsked)));
        assert!(matches!(
            probe_for_run(&auto, Some("0")),
            Ok(GpuStart::NotAsked)
        ));
        let off = GpuOptions {
            mode: GpuMode::Disable,
            ..GpuOptions::default()
        };
        let Ok(start) = probe_for_run(&off, Some("99")) else {
            panic!("--gpu disable -ngl 99 is not an error")
        };
        assert_eq!(
            start.lines(0, 30),
            vec!["gpu: none (--gpu disable); running on CPU".to_string()]
        );
        assert!(matches!(probe_for_run(&off, None), Ok(GpuStart::NotAsked)));
    }
}
