//! Which backend runs which blocks of a model: an ordered list of backends whose layer ranges
//! follow each other from block 0 to the last, and which of them (if any) computes the output
//! head. Owns the checks that a placement covers the model, the caches it makes for a sequence,
//! and the debug split read from `LLAMAFILE_SPLIT_LAYERS`.

use super::{Backend, BackendError, CpuBackend, KvTypes, SeqCache};
use crate::model::Model;
use std::ops::Range;
use std::sync::Arc;

/// The environment variable of the debug split: layer numbers where a new CPU backend starts.
pub const SPLIT_ENV: &str = "LLAMAFILE_SPLIT_LAYERS";

/// Why a list of backends cannot run a model.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlacementError {
    #[error("no backend given")]
    Empty,
    #[error("backend {name} runs layers {got:?}, but the previous one ends at layer {want}")]
    NotContiguous {
        name: String,
        got: Range<usize>,
        want: usize,
    },
    #[error("the backends run layers 0..{got}, but the model has {want} layers")]
    Coverage { got: usize, want: usize },
    #[error("the output head is placed on backend #{0}, but there is no such backend")]
    NoHeadBackend(usize),
    #[error("{SPLIT_ENV}={0:?}: expected layer numbers separated by commas, such as 12 or 8,16")]
    BadSplit(String),
}

/// The backends of a model, in layer order.
#[derive(Clone)]
pub struct Placement {
    stages: Vec<Arc<dyn Backend>>,
    /// Index of the stage whose backend computes the output head; `None`: the host does.
    head: Option<usize>,
}

impl Placement {
    /// Every one of `n_layer` blocks on one CPU backend: the engine as it always ran.
    pub fn cpu(n_layer: usize) -> Placement {
        Placement {
            stages: vec![Arc::new(CpuBackend::new(0..n_layer))],
            head: None,
        }
    }

    /// `stages` running a model of `n_layer` blocks, the output head on stage `head` (or the
    /// host), after checking that the ranges follow each other and cover the model.
    pub fn new(
        stages: Vec<Arc<dyn Backend>>,
        head: Option<usize>,
        n_layer: usize,
    ) -> Result<Placement, PlacementError> {
        let mut next = 0;
        for b in &stages {
            let got = b.layers();
            if got.start != next || got.is_empty() {
                return Err(PlacementError::NotContiguous {
                    name: b.name().to_string(),
                    got,
                    want: next,
                });
            }
            next = got.end;
        }
        if stages.is_empty() {
            return Err(PlacementError::Empty);
        }
        if next != n_layer {
            return Err(PlacementError::Coverage {
                got: next,
                want: n_layer,
            });
        }
        if let Some(h) = head.filter(|&h| h >= stages.len()) {
            return Err(PlacementError::NoHeadBackend(h));
        }
        Ok(Placement { stages, head })
    }

    /// `n_layer` blocks on several CPU backends, a new one starting at each of `cuts`
    /// (increasing, each within `1..n_layer`).
    pub fn cpu_split(n_layer: usize, cuts: &[usize]) -> Result<Placement, PlacementError> {
        let mut bounds = vec![0];
        bounds.extend_from_slice(cuts);
        bounds.push(n_layer);
        let stages = bounds
            .windows(2)
            .map(|w| Arc::new(CpuBackend::new(w[0]..w[1])) as Arc<dyn Backend>)
            .collect();
        Placement::new(stages, None, n_layer)
    }

    /// The placement a model gets when loaded: all on the CPU, or the debug split of
    /// `LLAMAFILE_SPLIT_LAYERS` when it is set (see [`Placement::from_split_spec`]).
    pub fn from_env(n_layer: usize) -> Result<Placement, PlacementError> {
        match std::env::var(SPLIT_ENV) {
            Ok(spec) => Placement::from_split_spec(&spec, n_layer),
            Err(_) => Ok(Placement::cpu(n_layer)),
        }
    }

    /// The debug split `spec`: comma-separated layer numbers where a new CPU backend starts.
    /// Numbers that do not split this model (0, or at least `n_layer`) are left out, so that
    /// one setting serves models of every depth; an empty `spec` means no split.
    pub fn from_split_spec(spec: &str, n_layer: usize) -> Result<Placement, PlacementError> {
        let mut cuts = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let k: usize = part
                .parse()
                .map_err(|_| PlacementError::BadSplit(spec.to_string()))?;
            if (1..n_layer).contains(&k) {
                cuts.push(k);
            }
        }
        cuts.sort_unstable();
        cuts.dedup();
        Placement::cpu_split(n_layer, &cuts)
    }

    /// The backends, in layer order.
    pub fn stages(&self) -> &[Arc<dyn Backend>] {
        &self.stages
    }

    /// The backend that computes the output head, if not the host.
    pub fn head(&self) -> Option<&dyn Backend> {
        self.head.map(|h| &*self.stages[h])
    }

    /// What runs where, for messages: `layers 0..12 on cpu, 12..30 on cpu`.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .stages
            .iter()
            .map(|b| format!("{:?} on {}", b.layers(), b.name()))
            .collect();
        let head = self.head().map_or("cpu", |b| b.name());
        format!("layers {}; output head on {head}", parts.join(", "))
    }

    /// A fresh cache of one sequence for the first `n_layers` blocks of `model`, `n_ctx`
    /// positions stored as `types`: a part from each backend that runs any of those blocks.
    pub fn new_cache(
        &self,
        model: &Model,
        n_ctx: usize,
        n_layers: usize,
        types: KvTypes,
    ) -> Result<SeqCache, BackendError> {
        let mut parts = Vec::with_capacity(self.stages.len());
        for b in &self.stages {
            let layers = b.layers();
            let layers = layers.start..layers.end.min(n_layers);
            if layers.is_empty() {
                break;
            }
            parts.push(b.new_cache(model, layers, n_ctx, types)?);
        }
        Ok(SeqCache::new(parts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(p: &Placement) -> Vec<Range<usize>> {
        p.stages().iter().map(|b| b.layers()).collect()
    }

    #[test]
    fn split_spec_cuts_at_the_given_layers() {
        let p = Placement::from_split_spec("12", 30).unwrap();
        assert_eq!(ranges(&p), [0..12, 12..30]);
        let p = Placement::from_split_spec(" 20, 8,8", 30).unwrap();
        assert_eq!(ranges(&p), [0..8, 8..20, 20..30]);
    }

    #[test]
    fn split_spec_leaves_out_cuts_this_model_cannot_have() {
        let p = Placement::from_split_spec("0,30,99", 30).unwrap();
        assert_eq!(ranges(&p), vec![(0..30)]);
        let p = Placement::from_split_spec("", 4).unwrap();
        assert_eq!(ranges(&p), vec![(0..4)]);
    }

    #[test]
    fn split_spec_refuses_what_is_not_a_layer_number() {
        let err = Placement::from_split_spec("12;18", 30).err().unwrap();
        assert_eq!(err, PlacementError::BadSplit("12;18".to_string()));
        assert!(err.to_string().contains("LLAMAFILE_SPLIT_LAYERS=\"12;18\""));
        assert!(Placement::from_split_spec("-1", 30).is_err());
    }

    #[test]
    fn new_refuses_gaps_overlaps_short_coverage_and_a_missing_head() {
        let cpu = |r: Range<usize>| Arc::new(CpuBackend::new(r)) as Arc<dyn Backend>;
        let gap = Placement::new(vec![cpu(0..4), cpu(5..8)], None, 8).err();
        assert!(matches!(
            gap,
            Some(PlacementError::NotContiguous { want: 4, .. })
        ));
        let overlap = Placement::new(vec![cpu(0..4), cpu(3..8)], None, 8).err();
        assert!(matches!(
            overlap,
            Some(PlacementError::NotContiguous { .. })
        ));
        let short = Placement::new(vec![cpu(0..4)], None, 8).err();
        assert_eq!(short, Some(PlacementError::Coverage { got: 4, want: 8 }));
        let head = Placement::new(vec![cpu(0..8)], Some(1), 8).err();
        assert_eq!(head, Some(PlacementError::NoHeadBackend(1)));
        assert_eq!(
            Placement::new(vec![], None, 8).err(),
            Some(PlacementError::Empty)
        );
        let ok = Placement::new(vec![cpu(0..4), cpu(4..8)], Some(1), 8).unwrap();
        assert_eq!(
            ok.describe(),
            "layers 0..4 on cpu, 4..8 on cpu; output head on cpu"
        );
    }
}
