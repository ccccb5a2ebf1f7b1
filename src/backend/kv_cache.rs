//! The host key/value cache of one sequence for a range of layers (all of them, or those the
//! CPU backend runs): for every layer, the keys and values of each position so far, stored as
//! f16 (as llama.cpp stores them by default). Position `p` lives in row `p`. Layers are named by
//! their model-global index. The rows are allocated zeroed and untouched, so memory is committed
//! as positions fill, not for the whole context up front. This is the CPU backend's
//! [`LayerCache`] and the host form every backend's cache copies to and from; a whole sequence's
//! cache is a [`SeqCache`](crate::backend::SeqCache) of such parts. The filled positions can be
//! written to a stream and read back into a cache of the same layers ([`KvCache::write_to`],
//! [`KvCache::read_from`]).

use super::{BackendError, LayerCache};
use half::f16;
use half::slice::HalfBitsSliceExt;
use std::any::Any;
use std::io::{self, Read, Write};
use std::ops::Range;

/// Why a cache could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum KvStateError {
    #[error("cannot read the KV cache: {0}")]
    Io(#[from] io::Error),
    #[error("the KV cache has {got_layers} layers of {got_dim} values a position; this one has {layers} of {dim}")]
    Shape {
        got_layers: usize,
        got_dim: usize,
        layers: usize,
        dim: usize,
    },
    #[error("the KV cache holds {len} positions; this one has room for {n_ctx}")]
    TooLong { len: usize, n_ctx: usize },
}

/// Cached keys and values of one sequence for layers `first_layer..first_layer + keys.len()`.
#[derive(Clone)]
pub struct KvCache {
    n_ctx: usize,
    kv_dim: usize,
    /// Model-global index of the first layer held.
    first_layer: usize,
    /// f16 bit patterns (a `u16` buffer can be allocated zeroed without touching it).
    keys: Vec<Vec<u16>>,
    values: Vec<Vec<u16>>,
    /// Positions `0..len` hold valid entries.
    len: usize,
}

impl KvCache {
    /// An empty cache for `n_layer` layers, up to `n_ctx` positions of `kv_dim` values each.
    pub fn new(n_layer: usize, n_ctx: usize, kv_dim: usize) -> KvCache {
        KvCache::for_layers(0..n_layer, n_ctx, kv_dim)
    }

    /// An empty cache for the model's layers `layers`, up to `n_ctx` positions of `kv_dim`
    /// values each.
    pub fn for_layers(layers: Range<usize>, n_ctx: usize, kv_dim: usize) -> KvCache {
        KvCache {
            n_ctx,
            kv_dim,
            first_layer: layers.start,
            keys: layers.clone().map(|_| vec![0u16; n_ctx * kv_dim]).collect(),
            values: layers.map(|_| vec![0u16; n_ctx * kv_dim]).collect(),
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

    /// Forgets positions `keep..`, so they can be written again.
    pub fn truncate(&mut self, keep: usize) {
        self.len = self.len.min(keep);
    }

    /// Context shift: drops positions `keep..keep + discard` and moves the later ones down by
    /// `discard`; `fix_key(layer, key)` (`layer` model-global) re-encodes each moved key for
    /// its new position.
    pub fn shift(
        &mut self,
        keep: usize,
        discard: usize,
        mut fix_key: impl FnMut(usize, &mut [f32]),
    ) {
        let end = self.len;
        assert!(keep + discard <= end, "kv cache: shift past the end");
        let d = self.kv_dim;
        let mut row = vec![0f32; d];
        for layer in 0..self.keys.len() {
            let keys = &mut self.keys[layer];
            keys.copy_within((keep + discard) * d..end * d, keep * d);
            for k in keys[keep * d..(end - discard) * d].chunks_exact_mut(d) {
                for (r, h) in row.iter_mut().zip(k.iter()) {
                    *r = f16::from_bits(*h).to_f32();
                }
                fix_key(self.first_layer + layer, &mut row);
                for (h, r) in k.iter_mut().zip(&row) {
                    *h = f16::from_f32(*r).to_bits();
                }
            }
            self.values[layer].copy_within((keep + discard) * d..end * d, keep * d);
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
        let at = pos * self.kv_dim;
        let l = layer - self.first_layer;
        for (d, s) in self.keys[l][at..at + self.kv_dim].iter_mut().zip(key) {
            *d = f16::from_f32(*s).to_bits();
        }
        for (d, s) in self.values[l][at..at + self.kv_dim].iter_mut().zip(value) {
            *d = f16::from_f32(*s).to_bits();
        }
    }

    /// Marks positions `..=pos` as filled.
    pub fn mark_filled(&mut self, pos: usize) {
        self.len = self.len.max(pos + 1);
    }

    /// All key rows of `layer` (model-global; row `p` is position `p`).
    pub fn keys(&self, layer: usize) -> &[f16] {
        self.keys[layer - self.first_layer].reinterpret_cast()
    }

    /// All value rows of `layer`.
    pub fn values(&self, layer: usize) -> &[f16] {
        self.values[layer - self.first_layer].reinterpret_cast()
    }

    /// All key rows of `layer`, writable (restoring a saved sequence; set the length with
    /// [`KvCache::mark_filled`] or [`KvCache::truncate`]).
    pub fn keys_mut(&mut self, layer: usize) -> &mut [f16] {
        self.keys[layer - self.first_layer].reinterpret_cast_mut()
    }

    /// All value rows of `layer`, writable.
    pub fn values_mut(&mut self, layer: usize) -> &mut [f16] {
        self.values[layer - self.first_layer].reinterpret_cast_mut()
    }
}

/// Saving and restoring a sequence (slot files).
impl KvCache {
    /// Writes the filled positions: the layer count, the values a position and the number of
    /// positions (little-endian u32, u32, u64), then each layer's keys and values as f16
    /// (little-endian). Returns the bytes written.
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<u64> {
        let d = self.kv_dim;
        w.write_all(&(self.keys.len() as u32).to_le_bytes())?;
        w.write_all(&(d as u32).to_le_bytes())?;
        w.write_all(&(self.len as u64).to_le_bytes())?;
        let mut bytes = Vec::with_capacity(self.len * d * 2);
        for rows in self.keys.iter().chain(&self.values) {
            bytes.clear();
            bytes.extend(rows[..self.len * d].iter().flat_map(|h| h.to_le_bytes()));
            w.write_all(&bytes)?;
        }
        Ok(16 + (self.keys.len() * 2 * self.len * d * 2) as u64)
    }

    /// Replaces the cache's contents with what [`KvCache::write_to`] wrote, which must have
    /// this cache's layers and row size and fit its context. Returns the bytes read. On an
    /// error the cache is left empty.
    pub fn read_from(&mut self, r: &mut impl Read) -> Result<u64, KvStateError> {
        self.len = 0;
        let mut word = [0u8; 4];
        r.read_exact(&mut word)?;
        let got_layers = u32::from_le_bytes(word) as usize;
        r.read_exact(&mut word)?;
        let got_dim = u32::from_le_bytes(word) as usize;
        let mut long = [0u8; 8];
        r.read_exact(&mut long)?;
        let len = usize::try_from(u64::from_le_bytes(long)).unwrap_or(usize::MAX);
        if got_layers != self.keys.len() || got_dim != self.kv_dim {
            return Err(KvStateError::Shape {
                got_layers,
                got_dim,
                layers: self.keys.len(),
                dim: self.kv_dim,
            });
        }
        if len > self.n_ctx {
            return Err(KvStateError::TooLong {
                len,
                n_ctx: self.n_ctx,
            });
        }
        let d = self.kv_dim;
        let mut bytes = vec![0u8; len * d * 2];
        for rows in self.keys.iter_mut().chain(self.values.iter_mut()) {
            r.read_exact(&mut bytes)?;
            for (h, b) in rows[..len * d].iter_mut().zip(bytes.chunks_exact(2)) {
                *h = u16::from_le_bytes([b[0], b[1]]);
            }
        }
        self.len = len;
        Ok(16 + (self.keys.len() * 2 * len * d * 2) as u64)
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
        let n = host.len * self.kv_dim;
        for (dst, src) in self.keys.iter_mut().zip(&host.keys) {
            dst[..n].copy_from_slice(&src[..n]);
        }
        for (dst, src) in self.values.iter_mut().zip(&host.values) {
            dst[..n].copy_from_slice(&src[..n]);
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
    fn written_state_reads_back_and_wrong_shapes_are_refused() {
        let mut c = KvCache::new(2, 8, 3);
        for p in 0..5 {
            for layer in 0..2 {
                let v = (p * 10 + layer) as f32 + 0.5;
                c.store(layer, p, &[v, -v, 1.0], &[v * 2.0, 0.25, -3.0]);
            }
            c.mark_filled(p);
        }
        let mut bytes = Vec::new();
        let n = c.write_to(&mut bytes).unwrap();
        assert_eq!(n, bytes.len() as u64);
        let mut back = KvCache::new(2, 6, 3);
        assert_eq!(back.read_from(&mut bytes.as_slice()).unwrap(), n);
        assert_eq!(back.len(), 5);
        for layer in 0..2 {
            assert_eq!(back.keys(layer)[..15], c.keys(layer)[..15]);
            assert_eq!(back.values(layer)[..15], c.values(layer)[..15]);
        }
        let short = KvCache::new(2, 4, 3).read_from(&mut bytes.as_slice());
        assert!(matches!(
            short,
            Err(KvStateError::TooLong { len: 5, n_ctx: 4 })
        ));
        let other = KvCache::new(3, 8, 3).read_from(&mut bytes.as_slice());
        assert!(matches!(other, Err(KvStateError::Shape { .. })));
        let mut cut = KvCache::new(2, 8, 3);
        assert!(matches!(
            cut.read_from(&mut &bytes[..bytes.len() - 1]),
            Err(KvStateError::Io(_))
        ));
        assert!(cut.is_empty());
    }
}
