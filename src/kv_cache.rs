//! The key/value cache of one sequence: for every layer, the keys and values of each position so
//! far, stored as f16 (as llama.cpp stores them by default). Position `p` lives in row `p`.

use half::f16;

/// Cached keys and values of one sequence.
pub struct KvCache {
    n_ctx: usize,
    kv_dim: usize,
    keys: Vec<Vec<f16>>,
    values: Vec<Vec<f16>>,
    /// Positions `0..len` hold valid entries.
    len: usize,
}

impl KvCache {
    /// An empty cache for `n_layer` layers, up to `n_ctx` positions of `kv_dim` values each.
    pub fn new(n_layer: usize, n_ctx: usize, kv_dim: usize) -> KvCache {
        KvCache {
            n_ctx,
            kv_dim,
            keys: (0..n_layer)
                .map(|_| vec![f16::ZERO; n_ctx * kv_dim])
                .collect(),
            values: (0..n_layer)
                .map(|_| vec![f16::ZERO; n_ctx * kv_dim])
                .collect(),
            len: 0,
        }
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

    /// Stores one position's key and value rows for `layer`.
    pub fn store(&mut self, layer: usize, pos: usize, key: &[f32], value: &[f32]) {
        assert!(
            pos < self.n_ctx,
            "kv cache: position {pos} beyond context {}",
            self.n_ctx
        );
        let at = pos * self.kv_dim;
        for (d, s) in self.keys[layer][at..at + self.kv_dim].iter_mut().zip(key) {
            *d = f16::from_f32(*s);
        }
        for (d, s) in self.values[layer][at..at + self.kv_dim]
            .iter_mut()
            .zip(value)
        {
            *d = f16::from_f32(*s);
        }
    }

    /// Marks positions `..=pos` as filled.
    pub fn mark_filled(&mut self, pos: usize) {
        self.len = self.len.max(pos + 1);
    }

    /// All key rows of `layer` (row `p` is position `p`).
    pub fn keys(&self, layer: usize) -> &[f16] {
        &self.keys[layer]
    }

    /// All value rows of `layer`.
    pub fn values(&self, layer: usize) -> &[f16] {
        &self.values[layer]
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
}
