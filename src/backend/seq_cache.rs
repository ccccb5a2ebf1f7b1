//! The KV cache of one sequence as the forward pass sees it: one part per backend of the
//! model's [`Placement`](super::Placement), each holding the layers that backend runs. Owns the
//! parts and the questions asked of the whole sequence (capacity, length, truncation); the
//! parts' contents belong to their backends.

use super::LayerCache;
use crate::backend::KvCache;
use half::f16;
use std::ops::Range;

/// Keys and values of one sequence, split by layer range.
pub struct SeqCache {
    /// One per backend that runs at least one of the sequence's layers, in layer order.
    parts: Vec<Box<dyn LayerCache>>,
}

impl SeqCache {
    /// A cache of `parts` (from each backend's `new_cache`, in the placement's order, their
    /// ranges following each other from layer 0 and their capacities equal).
    pub fn new(parts: Vec<Box<dyn LayerCache>>) -> SeqCache {
        debug_assert!(
            !parts.is_empty(),
            "a sequence cache holds at least one layer"
        );
        debug_assert!(parts
            .windows(2)
            .all(|w| { w[0].layers().end == w[1].layers().start && w[0].n_ctx() == w[1].n_ctx() }));
        SeqCache { parts }
    }

    /// Capacity in positions.
    pub fn n_ctx(&self) -> usize {
        self.parts[0].n_ctx()
    }

    /// Number of positions filled.
    pub fn len(&self) -> usize {
        self.parts[0].len()
    }

    /// True when no position is filled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets positions `keep..` in every part.
    pub fn truncate(&mut self, keep: usize) {
        self.parts.iter_mut().for_each(|p| p.truncate(keep));
    }

    /// The layers held: `0..n` (fewer than the model's for an early-exit draft).
    pub fn layers(&self) -> Range<usize> {
        0..self.parts.last().map_or(0, |p| p.layers().end)
    }

    /// The parts, in layer order.
    pub fn parts(&self) -> &[Box<dyn LayerCache>] {
        &self.parts
    }

    /// The parts, writable (the forward pass hands each to its backend).
    pub fn parts_mut(&mut self) -> &mut [Box<dyn LayerCache>] {
        &mut self.parts
    }

    /// The host cache holding `layer`, when that layer's part is on the host.
    pub fn host_part(&self, layer: usize) -> Option<&KvCache> {
        self.parts
            .iter()
            .find(|p| p.layers().contains(&layer))
            .and_then(|p| p.host())
    }

    /// All key rows of `layer` (row `p` is position `p`).
    ///
    /// Panics when the layer is not held or not on the host (copy a device part with
    /// [`LayerCache::to_host`] first).
    pub fn keys(&self, layer: usize) -> &[f16] {
        self.expect_host(layer).keys(layer)
    }

    /// All value rows of `layer`; panics as [`SeqCache::keys`] does.
    pub fn values(&self, layer: usize) -> &[f16] {
        self.expect_host(layer).values(layer)
    }

    fn expect_host(&self, layer: usize) -> &KvCache {
        self.host_part(layer)
            .unwrap_or_else(|| panic!("kv cache: layer {layer} is not held on the host"))
    }
}
