//! A model's data: its configuration (the architecture table), its weights (views into the
//! mapped GGUF), and the description of a forward pass's work ([`Batch`], [`ForwardPlan`]).
//! What runs the blocks is a backend's business (`backend`), and the pass across backends the
//! engine's (`engine::PlacedModel`); this module imports neither.

mod batch;
mod classifier;
mod config;
mod encoder;
pub mod lora;
mod mla;
mod moe_config;
mod weights;

pub use batch::{Batch, ForwardPlan};
pub use classifier::{Classifier, CLS_OUT};
pub use config::{
    Arch, Config, Family, FfnActivation, Fused, NormPlacement, RopeConfig, RopeFactors,
    SlidingWindow, SwaRule,
};
pub use encoder::{EncoderLayer, EncoderWeights, LayerNorm, Linear};
pub use lora::{LoraAdapter, LoraError, LoraMix};
pub use mla::{MlaConfig, MlaQuery, MlaWeights};
pub use moe_config::{MoeConfig, MoeRule, SharedExperts};
pub use weights::{
    Attention, DenseFfn, Experts, Ffn, Layer, MhaWeights, MoeFfn, RowView, SharedExpert, Tensor,
    Weights,
};

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
}

/// A model ready to run.
pub struct Model {
    pub config: Config,
    pub weights: Weights,
    pub file: Arc<GgufFile>,
    /// LoRA adapters loaded for the model (`--lora`), by id; a forward pass applies those its
    /// [`LoraMix`] gives a scale.
    pub lora: Vec<Arc<LoraAdapter>>,
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
            lora: Vec::new(),
        })
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
