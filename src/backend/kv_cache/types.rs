//! Which [`KvType`] a cache stores its keys and its values in (`-ctk`/`-ctv`), and the check
//! llama.cpp makes before it makes such a cache: a quantized type's block must divide the head
//! size, so that every head's slice of a row is whole blocks.

use crate::model::Model;
use crate::ops::attention::{rotation, KvType};

/// The storage types of keys and values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvTypes {
    pub k: KvType,
    pub v: KvType,
}

/// Why a model cannot have a cache of the types asked for.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KvTypeError {
    #[error("K cache type {ty} with block size {block} does not divide the head size {head}")]
    KeyBlock {
        ty: KvType,
        block: usize,
        head: usize,
    },
    #[error("V cache type {ty} with block size {block} does not divide the head size {head}")]
    ValueBlock {
        ty: KvType,
        block: usize,
        head: usize,
    },
    #[error("-ctk/-ctv ({types}): {backend} keeps its KV cache in f16 only; add -ngl 0 to run on the CPU with these cache types")]
    Device { backend: String, types: KvTypes },
}

impl KvTypes {
    /// The same type for keys and values.
    pub fn both(ty: KvType) -> KvTypes {
        KvTypes { k: ty, v: ty }
    }

    /// Refuses types whose block does not divide the head size `head` (values per head of a
    /// cache row).
    pub fn check(&self, head: usize) -> Result<(), KvTypeError> {
        let (kb, vb) = (self.k.block_elems(), self.v.block_elems());
        if !head.is_multiple_of(kb) {
            return Err(KvTypeError::KeyBlock {
                ty: self.k,
                block: kb,
                head,
            });
        }
        if !head.is_multiple_of(vb) {
            return Err(KvTypeError::ValueBlock {
                ty: self.v,
                block: vb,
                head,
            });
        }
        Ok(())
    }
}

impl KvTypes {
    /// [`KvTypes::check`] for `model`'s heads (a latent attention row, the latent and the
    /// rotated key part, is one head).
    pub fn check_model(&self, model: &Model) -> Result<(), KvTypeError> {
        let c = &model.config;
        self.check(c.mla.as_ref().map_or(c.head_dim, |m| m.cache_dim()))
    }

    /// The block size queries and keys are rotated in before keys are stored, for heads of
    /// `head_dim` (llama.cpp rotates them when the keys are quantized; see
    /// [`rotation`](crate::ops::attention::rotation)).
    pub fn key_rotation(&self, head_dim: usize) -> Option<usize> {
        self.k
            .is_quantized()
            .then(|| rotation::key_block(head_dim))
            .flatten()
    }

    /// The block size values are rotated in before they are stored (and the attention output
    /// after), when the values are quantized.
    pub fn value_rotation(&self, head_dim: usize) -> Option<usize> {
        self.v
            .is_quantized()
            .then(|| rotation::value_block(head_dim))
            .flatten()
    }

    /// Whether these are the f16 keys and values every backend can store.
    pub fn is_default(&self) -> bool {
        *self == KvTypes::default()
    }
}

impl std::fmt::Display for KvTypes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "K {}, V {}", self.k, self.v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_must_divide_the_head() {
        assert_eq!(KvTypes::both(KvType::Q8_0).check(64), Ok(()));
        assert_eq!(KvTypes::both(KvType::F16).check(40), Ok(()));
        let e = KvTypes {
            k: KvType::F16,
            v: KvType::Q4_0,
        }
        .check(40)
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "V cache type q4_0 with block size 32 does not divide the head size 40"
        );
        assert!(matches!(
            KvTypes::both(KvType::Iq4Nl).check(80),
            Err(KvTypeError::KeyBlock { .. })
        ));
    }
}
