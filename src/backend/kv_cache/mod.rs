//! The host key/value cache of one sequence for a range of layers (all of them, or those the
//! CPU backend runs): for every layer, the keys and values of each position so far, each stored
//! in its [`KvType`] (f16 by default, as llama.cpp; `-ctk`/`-ctv` pick others, see [`KvTypes`]).
//! Position `p` lives in row `p`. Layers are named by their model-global index. The rows are
//! allocated zeroed and untouched, so memory is committed as positions fill, not for the whole
//! context up front. This is the CPU backend's [`LayerCache`] and the host form every backend's
//! cache copies to and from; a whole sequence's cache is a
//! [`SeqCache`](crate::backend::SeqCache) of such parts. The filled positions can be written to
//! a stream and read back into a cache of the same layers and types (`state.rs`).

mod state;
mod types;

pub use state::KvStateError;
pub use types::{KvTypeError, KvTypes};

use super::{BackendError, LayerCache};
use crate::ops::attention::{KvRows, KvType};
use half::f16;
use std::any::Any;
use std::ops::Range;

/// Cached keys and values of one sequence for layers `first_layer..first_layer + keys.len()`.
#[derive(Clone)]
pub struct KvCache {
    n_ctx: usize,
    kv_dim: usize,
    types: KvTypes,
    /// Model-global index of the first layer held.
    first_layer: usize,
    /// Per layer, `n_ctx` rows of `kv_dim` values encoded in `types.k` / `types.v`.
    keys: Vec<Vec<u8>>,
    values: Vec<Vec<u8>>,
    /// Positions `0..len` hold valid entries.
    len: usize,
}

impl KvCache {
    /// An empty f16 cache for `n_layer` layers, up to `n_ctx` positions of `kv_dim` values each.
    pub fn new(n_layer: usize, n_ctx: usize, kv_dim: usize) -> KvCache {
        KvCache::for_layers(0..n_layer, n_ctx, kv_dim)
    }

    /// An empty f16 cache for the model's layers `layers`, up to `n_ctx` positions of `kv_dim`
    /// values each.
    pub fn for_layers(layers: Range<usize>, n_ctx: usize, kv_dim: usize) -> KvCache {
        KvCache::typed(layers, n_ctx, kv_dim, KvTypes::default())
    }

    /// An empty cache for `layers` whose keys and values are stored as `types` says (`kv_dim`
    /// a multiple of both types' block size; see [`KvTypes::check`]).
    pub fn typed(layers: Range<usize>, n_ctx: usize, kv_dim: usize, types: KvTypes) -> KvCache {
        for t in [types.k, types.v] {
            assert!(
                kv_dim.is_multiple_of(t.block_elems()),
                "kv cache: rows of {kv_dim} values cannot be stored as {t}"
            );
        }
        let (kb, vb) = (types.k.row_bytes(kv_dim), types.v.row_bytes(kv_dim));
        KvCache {
            n_ctx,
            kv_dim,
            types,
            first_layer: layers.start,
            keys: layers.clone().map(|_| vec![0u8; n_ctx * kb]).collect(),
            values: layers.map(|_| vec![0u8; n_ctx * vb]).collect(),
            len: 0,
        }
    }

    /// The layers held (model-global indices).
    pub fn layers(&self) -> Range<usize> {
        self.first_layer..self.first_layer + self.keys.len()
    }

    /// Values per position and layer, keys and values each.
    pub fn kv_dim(&self) -> usize {
        self.kv_dim
    }

    /// How keys and values are stored.
    pub fn types(&self) -> KvTypes {
        self.types
    }

    /// Capacity in positions.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Number of positions filled.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no position is filled.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of one position's key row and value row.
    pub fn row_bytes(&self) -> (usize, usize) {
        (
            self.types.k.row_bytes(self.kv_dim),
            self.types.v.row_bytes(self.kv_dim),
        )
    }

    /// Forgets positions `keep..`, so they can be written again.
    pub fn truncate(&mut self, keep: usize) {
        self.len = self.len.min(keep);
    }

    /// Context shift: drops positions `keep..keep + discard` and moves the later ones down by
    /// `discard`; `fix_key(layer, key)` (`layer` model-global) re-encodes each moved key for
    /// its new position (the key is decoded from its type, fixed, and encoded again).
    pub fn shift(
        &mut self,
        keep: usize,
        discard: usize,
        mut fix_key: impl FnMut(usize, &mut [f32]),
    ) {
        let end = self.len;
        assert!(keep + discard <= end, "kv cache: shift past the end");
        let (kb, vb) = self.row_bytes();
        let kt = self.types.k;
        let mut row = vec![0f32; self.kv_dim];
        for layer in 0..self.keys.len() {
            let keys = &mut self.keys[layer];
            keys.copy_within((keep + discard) * kb..end * kb, keep * kb);
            for k in keys[keep * kb..(end - discard) * kb].chunks_exact_mut(kb) {
                kt.decode(k, &mut row);
                fix_key(self.first_layer + layer, &mut row);
                kt.encode(&row, k);
            }
            self.values[layer].copy_within((keep + discard) * vb..end * vb, keep * vb);
        }
        self.len = end - discard;
    }

    /// Stores one position's key and value rows for `layer`.
    pub fn store(&mut self, layer: usize, pos: usize, key: &[f32], value: &[f32]) {
        assert!(
            pos < self.n_ctx,
            "kv cache: position {pos} beyond context {}",
            self.n_ctx
        );
        let (kb, vb) = self.row_bytes();
        let l = layer - self.first_layer;
        let d = self.kv_dim;
        self.types
            .k
            .encode(&key[..d], &mut self.keys[l][pos * kb..(pos + 1) * kb]);
        self.types
            .v
            .encode(&value[..d], &mut self.values[l][pos * vb..(pos + 1) * vb]);
    }

    /// Marks positions `..=pos` as filled.
    pub fn mark_filled(&mut self, pos: usize) {
        self.len = self.len.max(pos + 1);
    }

    /// All key rows of `layer` (model-global; row `p` is position `p`) as attention reads them.
    pub fn key_rows(&self, layer: usize) -> KvRows<'_> {
        KvRows {
            ty: self.types.k,
            bytes: &self.keys[layer - self.first_layer],
            row_bytes: self.row_bytes().0,
        }
    }

    /// All value rows of `layer`.
    pub fn value_rows(&self, layer: usize) -> KvRows<'_> {
        KvRows {
            ty: self.types.v,
            bytes: &self.values[layer - self.first_layer],
            row_bytes: self.row_bytes().1,
        }
    }

    /// All key rows of `layer` as f16 values. Panics unless the keys are stored as f16.
    pub fn keys(&self, layer: usize) -> &[f16] {
        self.key_rows(layer)
            .as_f16()
            .unwrap_or_else(|| panic!("kv cache: the keys are {}, not f16", self.types.k))
    }

    /// All value rows of `layer` as f16 values; panics as [`KvCache::keys`] does.
    pub fn values(&self, layer: usize) -> &[f16] {
        self.value_rows(layer)
            .as_f16()
            .unwrap_or_else(|| panic!("kv cache: the values are {}, not f16", self.types.v))
    }

    /// The encoded key rows of `layer`, writable (restoring a saved sequence; set the length
    /// with [`KvCache::mark_filled`] or [`KvCache::truncate`]).
    pub fn key_bytes_mut(&mut self, layer: usize) -> &mut [u8] {
        &mut self.keys[layer - self.first_layer]
    }

    /// The encoded value rows of `layer`, writable.
    pub fn value_bytes_mut(&mut self, layer: usize) -> &mut [u8] {
        &mut self.values[layer - self.first_layer]
    }
}

impl LayerCache for KvCache {
    fn layers(&self) -> Range<usize> {
        KvCache::layers(self)
    }

    fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    fn len(&self) -> usize {
        self.len
    }

    fn truncate(&mut self, keep: usize) {
        KvCache::truncate(self, keep)
    }

    fn host(&self) -> Option<&KvCache> {
        Some(self)
    }

    fn to_host(&self) -> Result<KvCache, BackendError> {
        Ok(self.clone())
    }

    fn load_host(&mut self, host: &KvCache) -> Result<(), BackendError> {
        if host.layers() != KvCache::layers(self)
            || host.kv_dim != self.kv_dim
            || host.len > self.n_ctx
        {
            return Err(BackendError::LayerMismatch {
                want: KvCache::layers(self),
                got: host.layers(),
            });
        }
        if host.types != self.types {
            return Err(BackendError::CacheTypes {
                want: self.types.to_string(),
                got: host.types.to_string(),
            });
        }
        let (kb, vb) = self.row_bytes();
        for (dst, src) in self.keys.iter_mut().zip(&host.keys) {
            dst[..host.len * kb].copy_from_slice(&src[..host.len * kb]);
        }
        for (dst, src) in self.values.iter_mut().zip(&host.values) {
            dst[..host.len * vb].copy_from_slice(&src[..host.len * vb]);
        }
        self.len = host.len;
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_and_truncate() {
        let mut c = KvCache::new(2, 4, 2);
        c.store(1, 2, &[1.0, 2.0], &[3.0, 4.0]);
        c.mark_filled(2);
        assert_eq!(c.len(), 3);
        assert_eq!(c.keys(1)[4].to_f32(), 1.0);
        assert_eq!(c.values(1)[5].to_f32(), 4.0);
        c.truncate(1);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn shift_drops_a_range_and_fixes_moved_keys() {
        let mut c = KvCache::new(2, 8, 2);
        for p in 0..6 {
            for layer in 0..2 {
                let v = (10 * p + layer) as f32;
                c.store(layer, p, &[v, -v], &[v + 0.5, 0.0]);
            }
            c.mark_filled(p);
        }
        // keep 1, drop positions 1..3; keys of moved rows get +1000 from the fix-up
        c.shift(1, 2, |_, k| k.iter_mut().for_each(|x| *x += 1000.0));
        assert_eq!(c.len(), 4);
        let key = |layer: usize, p: usize| c.keys(layer)[p * 2].to_f32();
        let value = |layer: usize, p: usize| c.values(layer)[p * 2].to_f32();
        assert_eq!(key(0, 0), 0.0);
        assert_eq!(key(1, 0), 1.0);
        assert_eq!([key(0, 1), key(0, 2), key(0, 3)], [1030.0, 1040.0, 1050.0]);
        assert_eq!([value(1, 1), value(1, 2), value(1, 3)], [31.5, 41.5, 51.5]);
    }

    #[test]
    fn a_range_of_layers_is_named_by_model_layer() {
        let mut c = KvCache::for_layers(5..7, 4, 2);
        assert_eq!(c.layers(), 5..7);
        c.store(6, 1, &[1.0, 2.0], &[3.0, 4.0]);
        c.mark_filled(1);
        assert_eq!(c.keys(6)[2].to_f32(), 1.0);
        assert_eq!(c.values(6)[3].to_f32(), 4.0);
        assert!(c.keys(5).iter().all(|k| k.to_f32() == 0.0));
        let mut seen = Vec::new();
        c.shift(0, 1, |layer, _| seen.push(layer));
        assert_eq!(seen, [5, 6]);
    }

    #[test]
    fn a_host_copy_loads_back_only_into_the_same_layers() {
        let mut c = KvCache::for_layers(2..4, 8, 2);
        for p in 0..3 {
            c.store(3, p, &[p as f32, 1.0], &[2.0, p as f32]);
            c.mark_filled(p);
        }
        let saved = LayerCache::to_host(&c).unwrap();
        let mut restored = KvCache::for_layers(2..4, 16, 2);
        restored.load_host(&saved).unwrap();
        assert_eq!(restored.len(), 3);
        assert_eq!(restored.keys(3)[..6], c.keys(3)[..6]);
        assert_eq!(restored.values(3)[..6], c.values(3)[..6]);
        let mut other = KvCache::for_layers(0..2, 16, 2);
        assert!(other.load_host(&saved).is_err());
        let mut small = KvCache::for_layers(2..4, 2, 2);
        assert!(small.load_host(&saved).is_err());
    }

    #[test]
    fn a_quantized_cache_stores_shifts_and_refuses_other_types() {
        let types = KvTypes {
            k: KvType::Q8_0,
            v: KvType::Q4_1,
        };
        let dim = 64;
        let mut c = KvCache::typed(0..1, 8, dim, types);
        let row =
            |p: usize| -> Vec<f32> { (0..dim).map(|i| ((p * 7 + i) % 13) as f32 - 6.0).collect() };
        for p in 0..5 {
            c.store(0, p, &row(p), &row(p + 1));
            c.mark_filled(p);
        }
        let decode = |rows: KvRows, p: usize| {
            let mut out = vec![0f32; dim];
            rows.ty.decode(
                &rows.bytes[p * rows.row_bytes..][..rows.row_bytes],
                &mut out,
            );
            out
        };
        // q8_0: steps of 6/127; q4_1: steps of 12/15
        let close =
            |a: &[f32], b: &[f32], tol: f32| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol);
        assert!(close(&decode(c.key_rows(0), 3), &row(3), 0.03));
        assert!(close(&decode(c.value_rows(0), 3), &row(4), 0.41));
        // drop positions 1..3; moved keys get +1 from the fix-up, re-encoded
        c.shift(1, 2, |_, k| k.iter_mut().for_each(|x| *x += 1.0));
        assert_eq!(c.len(), 3);
        let shifted: Vec<f32> = row(3).iter().map(|x| x + 1.0).collect();
        assert!(close(&decode(c.key_rows(0), 1), &shifted, 0.06));
        assert!(close(&decode(c.value_rows(0), 1), &row(4), 0.41));
        assert!(close(&decode(c.key_rows(0), 0), &row(0), 0.03));
        let mut f16 = KvCache::typed(0..1, 8, dim, KvTypes::default());
        assert!(matches!(
            f16.load_host(&c),
            Err(BackendError::CacheTypes { .. })
        ));
        let mut same = KvCache::typed(0..1, 8, dim, types);
        same.load_host(&c).unwrap();
        assert_eq!(same.len(), 3);
        let filled = 3 * c.row_bytes().0;
        assert_eq!(
            same.key_rows(0).bytes[..filled],
            c.key_rows(0).bytes[..filled]
        );
    }
}
