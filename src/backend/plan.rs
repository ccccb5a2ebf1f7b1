//! The `-ngl` plan: how many of a model's blocks a device runs, and which. As in llama.cpp, the
//! device takes the last blocks (the first ones stay on the CPU, next to the embedding lookup),
//! and the output head goes to the device only when more layers are asked for than the model
//! has (`-ngl 999`). Without a device backend every block stays on the CPU. Owns the arithmetic
//! only; building the device backend and saying what runs where belong to the device's module.

use super::{Backend, CpuBackend, Placement, PlacementError};
use std::ops::Range;
use std::sync::Arc;

/// What `-ngl` (`--n-gpu-layers`) asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuLayers {
    /// As many as fit (llama.cpp's `auto` and `-1`, its default). Planned as all of them; a
    /// device backend that measures its memory may offer fewer.
    Auto,
    /// Every block and the output head (`all`, or a negative number below -1).
    All,
    /// This many blocks (the last ones); more than the model has also places the head.
    Count(usize),
}

impl GpuLayers {
    /// The value of `-ngl`: a number, `auto` or `all`, as llama.cpp reads it (-1 is `auto`,
    /// lower negative numbers are `all`). `None` for anything else.
    pub fn parse(v: &str) -> Option<GpuLayers> {
        match v {
            "auto" => Some(GpuLayers::Auto),
            "all" => Some(GpuLayers::All),
            _ => match v.parse::<i64>().ok()? {
                -1 => Some(GpuLayers::Auto),
                n if n < -1 => Some(GpuLayers::All),
                n => Some(GpuLayers::Count(usize::try_from(n).unwrap_or(usize::MAX))),
            },
        }
    }
}

/// Which blocks run on the host and which on the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerPlan {
    /// Blocks on the CPU backend: the first ones.
    pub host: Range<usize>,
    /// Blocks on the device: the last ones (empty when nothing is offloaded).
    pub device: Range<usize>,
    /// The output head on the device too.
    pub head_on_device: bool,
}

impl LayerPlan {
    /// The plan for a model of `n_layer` blocks: `ngl` on the device when one is available,
    /// everything on the CPU when not.
    pub fn new(ngl: GpuLayers, n_layer: usize, device_available: bool) -> LayerPlan {
        let (n_device, head) = match ngl {
            _ if !device_available => (0, false),
            GpuLayers::Auto | GpuLayers::All => (n_layer, true),
            GpuLayers::Count(n) => (n.min(n_layer), n > n_layer),
        };
        let cut = n_layer - n_device;
        LayerPlan {
            host: 0..cut,
            device: cut..n_layer,
            head_on_device: head,
        }
    }

    /// Blocks on the device.
    pub fn n_device(&self) -> usize {
        self.device.len()
    }

    /// The placement of this plan: a CPU backend for the host blocks (if any), then `device`,
    /// which must have been built for [`LayerPlan::device`] (and hold the output head when
    /// [`LayerPlan::head_on_device`]). Without device blocks `device` is not used.
    pub fn placement(&self, device: Option<Arc<dyn Backend>>) -> Result<Placement, PlacementError> {
        let n_layer = self.device.end.max(self.host.end);
        let mut stages: Vec<Arc<dyn Backend>> = Vec::new();
        if !self.host.is_empty() {
            stages.push(Arc::new(CpuBackend::new(self.host.clone())));
        }
        let mut head = None;
        if let (false, Some(d)) = (self.device.is_empty(), device) {
            stages.push(d);
            head = self.head_on_device.then_some(stages.len() - 1);
        }
        Placement::new(stages, head, n_layer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_llama_cpp_values() {
        assert_eq!(GpuLayers::parse("auto"), Some(GpuLayers::Auto));
        assert_eq!(GpuLayers::parse("-1"), Some(GpuLayers::Auto));
        assert_eq!(GpuLayers::parse("all"), Some(GpuLayers::All));
        assert_eq!(GpuLayers::parse("-2"), Some(GpuLayers::All));
        assert_eq!(GpuLayers::parse("0"), Some(GpuLayers::Count(0)));
        assert_eq!(GpuLayers::parse("999"), Some(GpuLayers::Count(999)));
        assert_eq!(GpuLayers::parse("ten"), None);
    }

    #[test]
    fn the_device_takes_the_last_layers_and_the_head_only_past_the_count() {
        let p = LayerPlan::new(GpuLayers::Count(10), 30, true);
        assert_eq!((p.host, p.device, p.head_on_device), (0..20, 20..30, false));
        let p = LayerPlan::new(GpuLayers::Count(30), 30, true);
        assert_eq!((p.host, p.device, p.head_on_device), (0..0, 0..30, false));
        let p = LayerPlan::new(GpuLayers::Count(999), 30, true);
        assert_eq!((p.host, p.device, p.head_on_device), (0..0, 0..30, true));
        let p = LayerPlan::new(GpuLayers::All, 30, true);
        assert_eq!((p.n_device(), p.head_on_device), (30, true));
        let p = LayerPlan::new(GpuLayers::Count(0), 30, true);
        assert_eq!((p.host.clone(), p.n_device()), (0..30, 0));
    }

    #[test]
    fn without_a_device_everything_stays_on_the_cpu() {
        for ngl in [GpuLayers::Auto, GpuLayers::All, GpuLayers::Count(999)] {
            let p = LayerPlan::new(ngl, 30, false);
            assert_eq!(
                (p.host.clone(), p.n_device(), p.head_on_device),
                (0..30, 0, false)
            );
            let placement = p.placement(None).unwrap();
            assert_eq!(
                placement.describe(),
                "layers 0..30 on cpu; output head on cpu"
            );
        }
    }

    #[test]
    fn a_partial_plan_places_the_cpu_first() {
        let p = LayerPlan::new(GpuLayers::Count(10), 30, true);
        // A CPU backend standing in for the device: only the ranges matter here.
        let dev: Arc<dyn Backend> = Arc::new(CpuBackend::new(p.device.clone()));
        let placement = p.placement(Some(dev)).unwrap();
        assert_eq!(
            placement.describe(),
            "layers 0..20 on cpu, 20..30 on cpu; output head on cpu"
        );
        // A device built for other layers is refused.
        let wrong: Arc<dyn Backend> = Arc::new(CpuBackend::new(0..10));
        assert!(p.placement(Some(wrong)).is_err());
    }
}
