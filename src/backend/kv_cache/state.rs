//! Saving and restoring a host cache's filled positions (slot files, sequence state): the layer
//! count, the values a position, the key and value types (ggml ids) and the number of positions
//! (little-endian u32, u32, u32, u32, u64), then each layer's key rows and then each layer's
//! value rows, as stored (encoded in their types). A stream is read back only into a cache of
//! the same layers, row size and types.

use super::{KvCache, KvType, KvTypes};
use std::io::{self, Read, Write};

/// Bytes before the rows.
const HEADER: u64 = 24;

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
    #[error("the KV cache was saved with cache types {got}; this one has {want} (-ctk/-ctv)")]
    Types { got: String, want: String },
    #[error("the KV cache holds {len} positions; this one has room for {n_ctx}")]
    TooLong { len: usize, n_ctx: usize },
}

impl KvCache {
    /// Writes the filled positions as the module documentation says. Returns the bytes
    /// written.
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<u64> {
        w.write_all(&(self.keys.len() as u32).to_le_bytes())?;
        w.write_all(&(self.kv_dim as u32).to_le_bytes())?;
        w.write_all(&self.types.k.id().to_le_bytes())?;
        w.write_all(&self.types.v.id().to_le_bytes())?;
        w.write_all(&(self.len as u64).to_le_bytes())?;
        let (kb, vb) = self.row_bytes();
        for rows in &self.keys {
            w.write_all(&rows[..self.len * kb])?;
        }
        for rows in &self.values {
            w.write_all(&rows[..self.len * vb])?;
        }
        Ok(HEADER + (self.keys.len() * self.len * (kb + vb)) as u64)
    }

    /// Replaces the cache's contents with what [`KvCache::write_to`] wrote, which must have
    /// this cache's layers, row size and types and fit its context. Returns the bytes read. On
    /// an error the cache is left empty.
    pub fn read_from(&mut self, r: &mut impl Read) -> Result<u64, KvStateError> {
        self.len = 0;
        let mut word = || -> io::Result<u32> {
            let mut b = [0u8; 4];
            r.read_exact(&mut b)?;
            Ok(u32::from_le_bytes(b))
        };
        let got_layers = word()? as usize;
        let got_dim = word()? as usize;
        let (k_id, v_id) = (word()?, word()?);
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
        let name = |id: u32| KvType::from_id(id).map_or(format!("#{id}"), |t| t.to_string());
        let got = match (KvType::from_id(k_id), KvType::from_id(v_id)) {
            (Some(k), Some(v)) => Some(KvTypes { k, v }),
            _ => None,
        };
        if got != Some(self.types) {
            return Err(KvStateError::Types {
                got: format!("K {}, V {}", name(k_id), name(v_id)),
                want: self.types.to_string(),
            });
        }
        if len > self.n_ctx {
            return Err(KvStateError::TooLong {
                len,
                n_ctx: self.n_ctx,
            });
        }
        let (kb, vb) = self.row_bytes();
        for rows in &mut self.keys {
            r.read_exact(&mut rows[..len * kb])?;
        }
        for rows in &mut self.values {
            r.read_exact(&mut rows[..len * vb])?;
        }
        self.len = len;
        Ok(HEADER + (self.keys.len() * len * (kb + vb)) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(types: KvTypes, n_ctx: usize, dim: usize) -> KvCache {
        let mut c = KvCache::typed(0..2, n_ctx, dim, types);
        for p in 0..5 {
            for layer in 0..2 {
                let key: Vec<f32> = (0..dim)
                    .map(|i| (p * 10 + layer + i) as f32 + 0.5)
                    .collect();
                let value: Vec<f32> = (0..dim).map(|i| (i as f32 - p as f32) * 0.25).collect();
                c.store(layer, p, &key, &value);
            }
            c.mark_filled(p);
        }
        c
    }

    #[test]
    fn written_state_reads_back_and_wrong_shapes_are_refused() {
        let c = filled(KvTypes::default(), 8, 3);
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

    #[test]
    fn a_quantized_cache_reads_back_only_into_its_types() {
        let types = KvTypes {
            k: KvType::Q8_0,
            v: KvType::Q4_0,
        };
        let c = filled(types, 8, 64);
        let mut bytes = Vec::new();
        let n = c.write_to(&mut bytes).unwrap();
        assert_eq!(n, 24 + 2 * 5 * (68 + 36));
        let mut back = KvCache::typed(0..2, 8, 64, types);
        assert_eq!(back.read_from(&mut bytes.as_slice()).unwrap(), n);
        for layer in 0..2 {
            assert_eq!(back.key_rows(layer).bytes, c.key_rows(layer).bytes);
            assert_eq!(back.value_rows(layer).bytes, c.value_rows(layer).bytes);
        }
        let mut f16 = KvCache::typed(0..2, 8, 64, KvTypes::default());
        let e = f16.read_from(&mut bytes.as_slice()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the KV cache was saved with cache types K q8_0, V q4_0; this one has K f16, V f16 (-ctk/-ctv)"
        );
        assert!(f16.is_empty());
    }
}
