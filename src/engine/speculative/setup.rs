//! From the speculative-decoding flags to a [`Speculator`]: which draft sources, in which order
//! (the free n-gram lookups first, in llama.cpp's order, then a draft model, then the
//! early-exit draft, then the MoE draft), each checked against the target. What sequences
//! share ([`Shared`]: the `ngram-mod` pool, the lookup cache files) is made once.

use super::draft_model::{check_vocab, ModelDrafter, VocabMismatch};
use super::ngram::NgramDrafter;
use super::ngram_cache::{NgramCache, NgramCacheDrafter};
use super::ngram_map::NgramMapDrafter;
use super::ngram_mod::{NgramModDrafter, NgramPool};
use super::{lookup_file, Drafter, Speculator};
use crate::engine::loaded::Loaded;
use crate::engine::session::Session;
use crate::engine::PlacedModel;
use crate::model::ForwardPlan;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// What speculation to run: llama.cpp's speculative-decoding settings, from flags
/// (`cli::SpecArgs`) or a server's options.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecOptions {
    /// The draft model's name (`-md`).
    pub model_draft: Option<String>,
    /// Draft sources, comma-separated (`--spec-type`).
    pub spec_type: Option<String>,
    /// Most tokens a model draft proposes per step (n-gram drafts have their own sizes).
    pub draft_max: usize,
    /// Model drafts shorter than this are not verified.
    pub draft_min: usize,
    /// A model draft stops when its best token is less likely than this.
    pub draft_p_min: f32,
    /// ngram-simple: length of the n-gram looked up.
    pub ngram_size_n: usize,
    /// ngram-simple: most tokens proposed after a match.
    pub ngram_size_m: usize,
    /// ngram-map-k: key length, draft length, and (as in llama.cpp, unused by this type)
    /// minimum hits.
    pub map_k: MapOptions,
    /// ngram-map-k4v: key length, draft length, minimum key hits.
    pub map_k4v: MapOptions,
    /// ngram-mod: shortest and longest draft, n-gram length.
    pub mod_n_min: usize,
    pub mod_n_max: usize,
    pub mod_n_match: usize,
    /// ngram-cache: the static lookup cache file (`-lcs`).
    pub lookup_cache_static: Option<String>,
    /// ngram-cache: the dynamic lookup cache file (`-lcd`).
    pub lookup_cache_dynamic: Option<String>,
    /// Draft with the target's first N layers.
    pub n_layer_exit_draft: Option<usize>,
    /// Draft a MoE model with N routed experts per token.
    pub moe_draft_experts: Option<usize>,
}

/// The settings of an `ngram-map-*` type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapOptions {
    pub size_n: usize,
    pub size_m: usize,
    pub min_hits: u16,
}

/// A draft source named by `--spec-type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecType {
    NgramSimple,
    NgramMapK,
    NgramMapK4v,
    NgramMod,
    NgramCache,
    Draft,
    EarlyExit,
    /// The target with fewer routed experts per token (`--moe-draft-experts`).
    MoeDraft,
}

/// Why the flags do not describe a usable speculator.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    #[error(
        "--spec-type: unknown type {0:?} (known: none, draft-simple, ngram-simple, ngram-map-k, \
         ngram-map-k4v, ngram-mod, ngram-cache, early-exit, moe-draft)"
    )]
    UnknownType(String),
    #[error("--spec-type draft needs a draft model: -md FNAME")]
    NoDraftModel,
    #[error("-md: the draft model is a {0} encoder, which generates no text")]
    EncoderDraft(&'static str),
    #[error("--n-layer-exit-draft {n}: the model has {layers} layers; give 1 to {}", layers - 1)]
    ExitLayer { n: usize, layers: usize },
    #[error("--spec-type moe-draft: the model ({0}) has no experts")]
    NotMoe(String),
    #[error(
        "--moe-draft-experts 0: the model has no shared experts, so a draft without routed \
         experts would have no feed-forward blocks; give 1 to {0}"
    )]
    NoSharedExperts(usize),
    #[error("--moe-draft-experts {n}: the model has {experts} experts; give 0 to {experts}")]
    MoeExperts { n: usize, experts: usize },
    #[error("--spec-draft-p-min {0}: must be between 0 and 1")]
    PMin(f32),
    /// (Not a `source`: the message already carries the mismatch, once.)
    #[error("the draft model does not fit the target: {0}")]
    Vocab(VocabMismatch),
    /// A lookup cache file that cannot be read or parsed (the message names file and offset).
    #[error("{0}")]
    LookupCache(String),
    #[error("{flag} {value}: {why}")]
    Setting {
        flag: &'static str,
        value: usize,
        why: &'static str,
    },
}

/// The draft sources the flags ask for, in the order they are tried.
pub fn spec_types(args: &SpecOptions) -> Result<Vec<SpecType>, SpecError> {
    let mut types = Vec::new();
    if let Some(list) = &args.spec_type {
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match name {
                "none" => {}
                "ngram-simple" => types.push(SpecType::NgramSimple),
                "ngram-map-k" => types.push(SpecType::NgramMapK),
                "ngram-map-k4v" => types.push(SpecType::NgramMapK4v),
                "ngram-mod" => types.push(SpecType::NgramMod),
                "ngram-cache" => types.push(SpecType::NgramCache),
                "draft" | "draft-simple" => types.push(SpecType::Draft),
                "early-exit" => types.push(SpecType::EarlyExit),
                "moe-draft" => types.push(SpecType::MoeDraft),
                other => return Err(SpecError::UnknownType(other.to_string())),
            }
        }
    }
    if args.model_draft.is_some() {
        types.push(SpecType::Draft);
    }
    if args.n_layer_exit_draft.is_some() {
        types.push(SpecType::EarlyExit);
    }
    if args.moe_draft_experts.is_some() {
        types.push(SpecType::MoeDraft);
    }
    if types.contains(&SpecType::Draft) && args.model_draft.is_none() {
        return Err(SpecError::NoDraftModel);
    }
    if !(0.0..=1.0).contains(&args.draft_p_min) {
        return Err(SpecError::PMin(args.draft_p_min));
    }
    check_settings(args)?;
    let order = [
        SpecType::NgramSimple,
        SpecType::NgramMapK,
        SpecType::NgramMapK4v,
        SpecType::NgramMod,
        SpecType::NgramCache,
        SpecType::Draft,
        SpecType::EarlyExit,
        SpecType::MoeDraft,
    ];
    Ok(order.into_iter().filter(|t| types.contains(t)).collect())
}

/// The n-gram sizes llama.cpp accepts (its flags' ranges).
fn check_settings(args: &SpecOptions) -> Result<(), SpecError> {
    let checks: [(&'static str, usize, usize, usize); 10] = [
        ("--spec-ngram-simple-size-n", args.ngram_size_n, 1, 1024),
        ("--spec-ngram-simple-size-m", args.ngram_size_m, 1, 1024),
        ("--spec-ngram-map-k-size-n", args.map_k.size_n, 1, 1024),
        ("--spec-ngram-map-k-size-m", args.map_k.size_m, 1, 1024),
        ("--spec-ngram-map-k4v-size-n", args.map_k4v.size_n, 1, 1024),
        ("--spec-ngram-map-k4v-size-m", args.map_k4v.size_m, 1, 1024),
        ("--spec-ngram-mod-n-min", args.mod_n_min, 0, 1024),
        ("--spec-ngram-mod-n-max", args.mod_n_max, 0, 1024),
        ("--spec-ngram-mod-n-match", args.mod_n_match, 1, 1024),
        (
            "--spec-ngram-map-k4v-min-hits",
            args.map_k4v.min_hits.into(),
            1,
            65535,
        ),
    ];
    for (flag, value, lo, hi) in checks {
        if value < lo || value > hi {
            let why = if lo == 0 {
                "must be between 0 and 1024"
            } else if hi == 1024 {
                "must be between 1 and 1024"
            } else {
                "must be at least 1"
            };
            return Err(SpecError::Setting { flag, value, why });
        }
    }
    if args.map_k.min_hits == 0 {
        return Err(SpecError::Setting {
            flag: "--spec-ngram-map-k-min-hits",
            value: 0,
            why: "must be at least 1",
        });
    }
    Ok(())
}

/// What every sequence's speculator shares: the `ngram-mod` pool and the lookup caches read
/// from their files.
#[derive(Default)]
pub struct Shared {
    pool: Option<Arc<Mutex<NgramPool>>>,
    statics: Arc<NgramCache>,
    dynamic: Arc<NgramCache>,
}

impl Shared {
    /// Reads the lookup cache files and makes the pool, as far as `args` asks for them. A
    /// dynamic cache file that does not exist yet starts empty (generation creates it).
    pub fn new(args: &SpecOptions) -> Result<Shared, SpecError> {
        let types = spec_types(args)?;
        let mut shared = Shared::default();
        if types.contains(&SpecType::NgramMod) {
            shared.pool = Some(Arc::new(Mutex::new(NgramPool::new(args.mod_n_match))));
        }
        if types.contains(&SpecType::NgramCache) {
            let read = |p: &str| {
                lookup_file::load(p.as_ref()).map_err(|e| SpecError::LookupCache(e.to_string()))
            };
            if let Some(p) = &args.lookup_cache_static {
                shared.statics = Arc::new(read(p)?);
            }
            if let Some(p) = &args.lookup_cache_dynamic {
                if std::path::Path::new(p).exists() {
                    shared.dynamic = Arc::new(read(p)?);
                }
            }
        }
        Ok(shared)
    }
}

/// The speculator for `target`, with `draft` loaded when the types include a draft model.
/// `None` when no speculation was asked for. Its lookup caches are saved at
/// [`Speculator::finish`].
pub fn build<'a>(
    args: &SpecOptions,
    target: &'a Loaded,
    draft: Option<&'a Loaded>,
    n_ctx: usize,
    n_batch: usize,
) -> Result<Option<Speculator<'a>>, SpecError> {
    let shared = Shared::new(args)?;
    build_shared(args, &shared, true, target, draft, n_ctx, n_batch)
}

/// [`build`] for one of several sequences sharing `shared`; `save_dynamic`: whether this
/// sequence's [`Speculator::finish`] rewrites the dynamic lookup cache file (the CLI's
/// does; server slots only read it, as llama.cpp's server).
pub fn build_shared<'a>(
    args: &SpecOptions,
    shared: &Shared,
    save_dynamic: bool,
    target: &'a Loaded,
    draft: Option<&'a Loaded>,
    n_ctx: usize,
    n_batch: usize,
) -> Result<Option<Speculator<'a>>, SpecError> {
    let types = spec_types(args)?;
    if types.is_empty() {
        return Ok(None);
    }
    let n_vocab = target.model.config.n_vocab;
    let mut drafters: Vec<Box<dyn Drafter + Send + 'a>> = Vec::new();
    for t in types {
        match t {
            SpecType::NgramSimple => drafters.push(Box::new(NgramDrafter {
                size_n: args.ngram_size_n,
                size_m: args.ngram_size_m,
            })),
            SpecType::NgramMapK | SpecType::NgramMapK4v => {
                let (o, key_only) = if t == SpecType::NgramMapK {
                    (args.map_k, true)
                } else {
                    (args.map_k4v, false)
                };
                drafters.push(Box::new(NgramMapDrafter::new(
                    o.size_n, o.size_m, o.min_hits, key_only,
                )));
            }
            SpecType::NgramMod => {
                let pool = shared
                    .pool
                    .clone()
                    .unwrap_or_else(|| Arc::new(Mutex::new(NgramPool::new(args.mod_n_match))));
                drafters.push(Box::new(NgramModDrafter::new(
                    pool,
                    args.mod_n_min,
                    args.mod_n_max,
                )));
            }
            SpecType::NgramCache => {
                let save = args
                    .lookup_cache_dynamic
                    .as_ref()
                    .filter(|_| save_dynamic)
                    .map(PathBuf::from);
                drafters.push(Box::new(NgramCacheDrafter::new(
                    shared.dynamic.clone(),
                    shared.statics.clone(),
                    save,
                    n_vocab,
                )));
            }
            SpecType::Draft => {
                let draft = draft.ok_or(SpecError::NoDraftModel)?;
                let arch = draft.model.config.arch;
                if arch.is_encoder() {
                    return Err(SpecError::EncoderDraft(arch.name()));
                }
                check_vocab(&draft.tokenizer, &target.tokenizer).map_err(SpecError::Vocab)?;
                let session = Session::new(&draft.model, n_ctx, n_batch);
                drafters.push(Box::new(ModelDrafter::new(
                    session,
                    args.draft_p_min,
                    n_vocab,
                )));
            }
            SpecType::EarlyExit => {
                let layers = target.model.config.n_layer;
                let n = args.n_layer_exit_draft.unwrap_or(layers / 2);
                if n == 0 || n >= layers {
                    return Err(SpecError::ExitLayer { n, layers });
                }
                let session = Session::with_layers(&target.model, n_ctx, n_batch, n);
                drafters.push(Box::new(ModelDrafter::new(
                    session,
                    args.draft_p_min,
                    n_vocab,
                )));
            }
            SpecType::MoeDraft => {
                let plan = moe_draft_plan(&target.model, args.moe_draft_experts)?;
                let session = Session::with_plan(&target.model, n_ctx, n_batch, plan);
                drafters.push(Box::new(ModelDrafter::new(
                    session,
                    args.draft_p_min,
                    n_vocab,
                )));
            }
        }
    }
    Ok(Some(Speculator::new(
        drafters,
        args.draft_max,
        args.draft_min,
    )))
}

/// The forward plan of a MoE draft of `model` with `experts` routed experts per token (by
/// default none when the model has shared experts to fall back on, else one). It shares the
/// target's weights; its cache is its own, since its hidden states differ after the first
/// expert block.
pub fn moe_draft_plan(
    model: &PlacedModel,
    experts: Option<usize>,
) -> Result<ForwardPlan, SpecError> {
    let cfg = &model.config;
    let moe = cfg
        .moe
        .as_ref()
        .ok_or_else(|| SpecError::NotMoe(cfg.arch.name().to_string()))?;
    let shared = moe.shared.is_some();
    let n = experts.unwrap_or(if shared { 0 } else { 1 });
    if n > moe.n_expert {
        return Err(SpecError::MoeExperts {
            n,
            experts: moe.n_expert,
        });
    }
    if n == 0 && !shared {
        return Err(SpecError::NoSharedExperts(moe.n_expert));
    }
    Ok(ForwardPlan {
        routed_experts: Some(n),
        ..ForwardPlan::full(cfg)
    })
}
