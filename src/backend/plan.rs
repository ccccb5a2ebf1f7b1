//! The `-ngl` plan: how many of a model's blocks a device runs, and which. As in llama.cpp, the
//! device takes the last blocks (the first ones stay on the CPU, next to the embedding lookup),
//! and the output head goes to the device only when more layers are asked for than the model
//! has (`-ngl 999`). Without a device backend every block stays on the CPU. A device that runs
//! only some kinds of block splits its share into runs ([`LayerPlan::split`]): the blocks it
//! supports go to it, one device backend per run, and the others stay on the CPU between them.
//! Owns the arithmetic only; building the device backends and saying what runs where belong to
//! the device's module and the front end.

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

    /// Blocks in the model.
    fn n_layer(&self) -> usize {
        self.device.end.max(self.host.end)
    }

    /// Every block of the model in maximal runs, in layer order: on the device the blocks of
    /// [`LayerPlan::device`] for which `supports` says yes, on the CPU the host blocks and the
    /// refused ones (a refused block next to the host blocks joins their run).
    pub fn runs(&self, supports: impl Fn(usize) -> bool) -> Vec<Run> {
        let mut runs: Vec<Run> = Vec::new();
        for il in 0..self.n_layer() {
            let on_device = self.device.contains(&il) && supports(il);
            match runs.last_mut() {
                Some(r) if r.on_device == on_device => r.layers.end = il + 1,
                _ => runs.push(Run {
                    layers: il..il + 1,
                    on_device,
                }),
            }
        }
        runs
    }

    /// This plan for a device that runs only the blocks `supports` says yes to, and the output
    /// matrix when `head_supported`: the head goes to the device only when the plan asks for it,
    /// the device can run it, and the last block runs on the device.
    pub fn split(&self, supports: impl Fn(usize) -> bool, head_supported: bool) -> SplitPlan {
        let runs = self.runs(supports);
        let last_on_device = runs.last().is_some_and(|r| r.on_device);
        SplitPlan {
            head_on_device: self.head_on_device && head_supported && last_on_device,
            runs,
        }
    }

    /// The placement of this plan: a CPU backend for the host blocks (if any), then `device`,
    /// which must have been built for [`LayerPlan::device`] (and hold the output head when
    /// [`LayerPlan::head_on_device`]). Without device blocks `device` is not used.
    pub fn placement(&self, device: Option<Arc<dyn Backend>>) -> Result<Placement, PlacementError> {
        let devices = match self.device.is_empty() {
            true => Vec::new(),
            false => device.into_iter().collect(),
        };
        self.split(|_| true, true).placement(devices)
    }
}

/// Consecutive blocks that run on the same side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub layers: Range<usize>,
    /// On the device; else on the CPU.
    pub on_device: bool,
}

/// A [`LayerPlan`] cut where its device can and cannot run the blocks: what goes where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitPlan {
    /// Every block, in maximal runs in layer order, alternating between the CPU and the device.
    pub runs: Vec<Run>,
    /// The output head on the device: on the backend of the last run, which is a device run.
    pub head_on_device: bool,
}

impl SplitPlan {
    /// Blocks on the device.
    pub fn n_device(&self) -> usize {
        self.device_runs().map(|r| r.len()).sum()
    }

    /// The blocks of each device run, in layer order: one device backend is built for each.
    pub fn device_runs(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.runs
            .iter()
            .filter(|r| r.on_device)
            .map(|r| r.layers.clone())
    }

    /// The placement: a CPU backend for each run on the CPU, and for each run on the device the
    /// next of `devices`, which must have been built for the [`SplitPlan::device_runs`] in order
    /// (the last holding the output head when [`SplitPlan::head_on_device`]). Too few or too
    /// many devices, or one built for other blocks, are refused.
    pub fn placement(&self, devices: Vec<Arc<dyn Backend>>) -> Result<Placement, PlacementError> {
        let n_layer = self.runs.last().map_or(0, |r| r.layers.end);
        let mut devices = devices.into_iter();
        let mut stages: Vec<Arc<dyn Backend>> = Vec::new();
        for run in &self.runs {
            if !run.on_device {
                stages.push(Arc::new(CpuBackend::new(run.layers.clone())));
            } else if let Some(d) = devices.next() {
                stages.push(d);
            }
        }
        // A device left over follows the last block, which the placement refuses.
        stages.extend(devices);
        let head = self.head_on_device.then(|| stages.len() - 1);
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

    fn runs(plan: &SplitPlan) -> Vec<(Range<usize>, bool)> {
        plan.runs
            .iter()
            .map(|r| (r.layers.clone(), r.on_device))
            .collect()
    }

    #[test]
    fn the_device_takes_the_layers_it_supports_and_the_cpu_the_rest() {
        let p = LayerPlan::new(GpuLayers::Count(10), 30, true);
        let s = p.split(|il| il != 25, true);
        assert_eq!(
            runs(&s),
            [
                (0..20, false),
                (20..25, true),
                (25..26, false),
                (26..30, true)
            ]
        );
        assert_eq!(s.n_device(), 9);
        assert_eq!(s.device_runs().collect::<Vec<_>>(), [20..25, 26..30]);
        // -ngl 10 leaves the head on the CPU whatever the device supports.
        assert!(!s.head_on_device);
        // Layers the plan keeps on the host are never asked about.
        let s = p.split(
            |il| {
                assert!(il >= 20, "asked about host layer {il}");
                true
            },
            true,
        );
        assert_eq!(runs(&s), [(0..20, false), (20..30, true)]);
    }

    #[test]
    fn refused_layers_join_their_neighbours_on_the_cpu() {
        let p = LayerPlan::new(GpuLayers::All, 8, true);
        // The first device layers refused: one CPU run from layer 0.
        let s = p.split(|il| !(0..2).contains(&il) && il != 5 && il != 6, true);
        assert_eq!(
            runs(&s),
            [(0..2, false), (2..5, true), (5..7, false), (7..8, true)]
        );
        let p = LayerPlan::new(GpuLayers::Count(4), 8, true);
        let s = p.split(|il| il != 4, true);
        assert_eq!(runs(&s), [(0..5, false), (5..8, true)]);
        // Nothing supported: everything on the CPU, in one run.
        let s = p.split(|_| false, true);
        assert_eq!((runs(&s), s.n_device()), (vec![(0..8, false)], 0));
        assert!(!s.head_on_device);
        // Nothing asked for: the same.
        let p = LayerPlan::new(GpuLayers::Count(0), 8, true);
        assert_eq!(runs(&p.split(|_| true, true)), [(0..8, false)]);
    }

    #[test]
    fn the_head_goes_to_the_device_only_after_a_device_run_and_when_supported() {
        let p = LayerPlan::new(GpuLayers::Count(999), 30, true);
        assert!(p.split(|_| true, true).head_on_device);
        assert!(p.split(|il| il != 3, true).head_on_device);
        // The output matrix has no kernel: the head stays on the CPU, the blocks still go.
        let s = p.split(|_| true, false);
        assert_eq!((s.n_device(), s.head_on_device), (30, false));
        // The last block stays on the CPU: so does the head.
        let s = p.split(|il| il != 29, true);
        assert_eq!(runs(&s), [(0..29, true), (29..30, false)]);
        assert!(!s.head_on_device);
    }

    #[test]
    fn a_split_plan_places_one_device_backend_per_run_between_cpu_backends() {
        let p = LayerPlan::new(GpuLayers::Count(999), 30, true);
        let s = p.split(|il| il != 25 && il != 9, true);
        // CPU backends standing in for the device: only the ranges matter here.
        let dev = |r: Range<usize>| Arc::new(CpuBackend::new(r)) as Arc<dyn Backend>;
        let devices: Vec<_> = s.device_runs().map(dev).collect();
        assert_eq!(devices.len(), 3);
        let placement = s.placement(devices).unwrap();
        let stages: Vec<_> = placement.stages().iter().map(|b| b.layers()).collect();
        assert_eq!(stages, [0..9, 9..10, 10..25, 25..26, 26..30]);
        // The head is on the last stage, the last device run's backend.
        let head = placement.head().map(|b| b.layers());
        assert_eq!(head, Some(26..30));

        let p = LayerPlan::new(GpuLayers::Count(10), 30, true);
        let s = p.split(|il| il != 25, true);
        let placement = s.placement(s.device_runs().map(dev).collect()).unwrap();
        assert_eq!(
            placement.describe(),
            "layers 0..20 on cpu, 20..25 on cpu, 25..26 on cpu, 26..30 on cpu; \
             output head on cpu"
        );
        assert!(placement.head().is_none());
        // Too few devices, too many, or built for other blocks: refused.
        assert!(s.placement(vec![dev(20..25)]).is_err());
        let extra = vec![dev(20..25), dev(26..30), dev(26..30)];
        assert!(s.placement(extra).is_err());
        assert!(s.placement(vec![dev(20..26), dev(26..30)]).is_err());
        // Nothing on the device: CPU backends only.
        let s = p.split(|_| false, true);
        let placement = s.placement(Vec::new()).unwrap();
        assert_eq!(
            placement.describe(),
            "layers 0..30 on cpu; output head on cpu"
        );
    }
}
