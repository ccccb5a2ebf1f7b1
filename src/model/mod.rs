//! A loaded model: its configuration, its weights (views into the mapped GGUF) and the forward
//! pass that turns a batch of tokens into logits.

mod config;
mod forward;
mod weights;

pub use config::{Arch, Config, FfnActivation};
pub use forward::Batch;
pub use weights::{Layer, Tensor, Weights};

use crate::gguf::{GgufError, GgufFile};
use crate::quant::GgmlType;
use std::sync::Arc;

/// Why a model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("unknown architecture '{0}' (supported: llama, qwen2, gemma3)")]
    UnknownArchitecture(String),
    #[error("missing metadata key '{0}'")]
    MissingKey(String),
    #[error("bad value for metadata key '{0}': {1}")]
    BadValue(String, String),
    #[error("missing tensor '{0}'")]
    MissingTensor(String),
    #[error("tensor '{name}' has shape {got:?}, expected {want:?}")]
    TensorShape {
        name: String,
        want: Vec<usize>,
        got: Vec<usize>,
    },
    #[error(
        "tensor '{0}' is not used by this engine's {1} (it would change the computation, e.g. \
         rope_freqs.weight is Llama 3's RoPE scaling); refusing to run the model without it"
    )]
    UnusedTensor(String, String),
    #[error("tensor '{name}' has type {ty}, which cannot be a weight")]
    UnsupportedWeightType { name: String, ty: GgmlType },
}

/// A model ready to run.
pub struct Model {
    pub config: Config,
    pub weights: Weights,
    pub file: Arc<GgufFile>,
}

impl Model {
    /// Reads the configuration and locates every weight of `file`.
    pub fn load(file: Arc<GgufFile>) -> Result<Model, ModelError> {
        let config = Config::from_gguf(&file)?;
        let weights = Weights::load(&file, &config)?;
        Ok(Model {
            config,
            weights,
            file,
        })
    }

    /// A fresh KV cache for one sequence of up to `n_ctx` positions.
    pub fn new_cache(&self, n_ctx: usize) -> crate::kv_cache::KvCache {
        self.new_cache_layers(n_ctx, self.config.n_layer)
    }

    /// Context shift of `cache`: forgets positions `keep..keep + discard` and moves the rest
    /// down, re-rotating their keys for their new positions.
    pub fn shift_cache(&self, cache: &mut crate::kv_cache::KvCache, keep: usize, discard: usize) {
        let cfg = &self.config;
        let ropes: Vec<_> = (0..cfg.n_layer).map(|il| cfg.layer_rope(il)).collect();
        cache.shift(keep, discard, |layer, key| {
            ropes[layer].unrotate(key, cfg.head_dim, discard)
        });
    }

    /// A cache for the first `n_layers` blocks only (see [`Model::forward_layers`]).
    pub fn new_cache_layers(&self, n_ctx: usize, n_layers: usize) -> crate::kv_cache::KvCache {
        crate::kv_cache::KvCache::new(n_layers, n_ctx, self.config.kv_dim())
    }
}
