//! A loaded model: its configuration, its weights (views into the mapped GGUF), the placement
//! of its blocks on backends ([`Placement`]), and the forward pass that turns a batch of tokens
//! into logits through them. Caches and the context shift are made and done here, each part by
//! its backend.

mod config;
mod forward;
mod mla;
mod moe_config;
mod weights;

pub use config::{
    Arch, Config, Family, FfnActivation, Fused, NormPlacement, RopeConfig, RopeFactors,
    SlidingWindow, SwaRule,
};
pub use forward::{Batch, ForwardPlan};
pub use mla::{MlaConfig, MlaQuery, MlaWeights};
pub use moe_config::{MoeConfig, MoeRule, SharedExperts};
pub use weights::{
    Attention, DenseFfn, Experts, Ffn, Layer, MhaWeights, MoeFfn, RowView, SharedExpert, Tensor,
    Weights,
};

use crate::backend::{BackendError, Placement, PlacementError, SeqCache};
use crate::gguf::{GgufError, GgufFile};
use crate::quant::GgmlType;
use std::sync::Arc;

/// Why a model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("unknown architecture '{0}' (supported: {1})")]
    UnknownArchitecture(String, String),
    #[error("architecture '{0}' is not built: it needs {1}")]
    ArchitectureNotBuilt(String, &'static str),
    #[error("metadata '{0}' asks for {1}, which is not implemented")]
    NotImplemented(String, String),
    #[error("RoPE scaling '{0}' ({1}) is not implemented (supported: none, linear, longrope)")]
    UnsupportedRopeScaling(String, String),
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
        "tensor '{0}' is not read by this engine's {1} forward pass (it is part of a model \
         variant this engine does not build, such as experts stored one tensor each, or experts \
         without expert metadata); refusing to run the model without it"
    )]
    UnusedTensor(String, String),
    #[error("tensor '{name}' has type {ty}, which cannot be a weight")]
    UnsupportedWeightType { name: String, ty: GgmlType },
    #[error(transparent)]
    Placement(#[from] PlacementError),
}

/// A model ready to run.
pub struct Model {
    pub config: Config,
    pub weights: Weights,
    pub file: Arc<GgufFile>,
    /// Which backend runs which blocks (see [`Model::set_placement`]).
    placement: Placement,
}

impl Model {
    /// Reads the configuration and locates every weight of `file`. Every block runs on the
    /// CPU, or on the CPU backends of the debug split `LLAMAFILE_SPLIT_LAYERS` when it is set
    /// (see [`Placement::from_env`]).
    pub fn load(file: Arc<GgufFile>) -> Result<Model, ModelError> {
        let config = Config::from_gguf(&file)?;
        let weights = Weights::load(&file, &config)?;
        let placement = Placement::from_env(config.n_layer)?;
        Ok(Model {
            config,
            weights,
            file,
            placement,
        })
    }

    /// Which backend runs which blocks.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Runs the blocks on `placement`'s backends from now on (before any cache is made: caches
    /// made earlier belong to the old backends). Refused unless it covers this model's blocks.
    pub fn set_placement(&mut self, placement: Placement) -> Result<(), PlacementError> {
        let n = placement.stages().last().map_or(0, |b| b.layers().end);
        if n != self.config.n_layer {
            return Err(PlacementError::Coverage {
                got: n,
                want: self.config.n_layer,
            });
        }
        self.placement = placement;
        Ok(())
    }

    /// A fresh KV cache for one sequence of up to `n_ctx` positions. Panics if a backend
    /// cannot make its part (device memory); see [`Model::try_new_cache_layers`].
    pub fn new_cache(&self, n_ctx: usize) -> SeqCache {
        self.new_cache_layers(n_ctx, self.config.n_layer)
    }

    /// A cache for the first `n_layers` blocks only (see [`Model::forward_layers`]); panics as
    /// [`Model::new_cache`] does.
    pub fn new_cache_layers(&self, n_ctx: usize, n_layers: usize) -> SeqCache {
        self.try_new_cache_layers(n_ctx, n_layers)
            .unwrap_or_else(|e| panic!("cannot make a KV cache: {e}"))
    }

    /// [`Model::new_cache_layers`], passing a backend's failure on.
    pub fn try_new_cache_layers(
        &self,
        n_ctx: usize,
        n_layers: usize,
    ) -> Result<SeqCache, BackendError> {
        self.placement.new_cache(self, n_ctx, n_layers)
    }

    /// Context shift of `cache`: forgets positions `keep..keep + discard` and moves the rest
    /// down, re-rotating their keys for their new positions, each part on its backend. Panics
    /// if a backend fails; see [`Model::try_shift_cache`].
    pub fn shift_cache(&self, cache: &mut SeqCache, keep: usize, discard: usize) {
        self.try_shift_cache(cache, keep, discard)
            .unwrap_or_else(|e| panic!("context shift failed: {e}"))
    }

    /// [`Model::shift_cache`], passing a backend's failure on.
    pub fn try_shift_cache(
        &self,
        cache: &mut SeqCache,
        keep: usize,
        discard: usize,
    ) -> Result<(), BackendError> {
        for (backend, part) in self.placement.stages().iter().zip(cache.parts_mut()) {
            backend.shift(self, part.as_mut(), keep, discard)?;
        }
        Ok(())
    }

    /// The rotary embedding of layer `il` for a sequence whose cache holds `n_ctx_seq`
    /// positions: sliding-window layers may have their own base, and LongRoPE picks its long
    /// factors when that context exceeds the original one (as llama.cpp decides per context).
    pub fn layer_rope(&self, il: usize, n_ctx_seq: usize) -> crate::ops::rope::Rope {
        let rope = &self.config.rope;
        let w = &self.weights;
        let freq_factors = match rope.factors {
            RopeFactors::None => None,
            RopeFactors::Freqs => w.rope_freqs.clone(),
            RopeFactors::LongShort if n_ctx_seq > rope.n_ctx_orig => w.rope_long.clone(),
            RopeFactors::LongShort => w.rope_short.clone(),
        };
        crate::ops::rope::Rope {
            style: rope.style,
            n_dims: rope.dims,
            freq_base: self.config.layer_rope_base(il),
            freq_scale: rope.freq_scale,
            freq_factors,
            attn_factor: rope.attn_factor,
            yarn: rope.yarn,
        }
    }
}
