//! From the speculative-decoding flags to a [`Speculator`]: which draft sources, in which order
//! (the free n-gram lookup first, then a draft model, then the early-exit draft, then the MoE
//! draft), each checked against the target.

use super::draft_model::{check_vocab, ModelDrafter, VocabMismatch};
use super::ngram::NgramDrafter;
use super::{Drafter, Speculator};
use crate::app::Loaded;
use crate::cli::SpecArgs;
use crate::generate::Session;
use crate::model::{ForwardPlan, Model};

/// A draft source named by `--spec-type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecType {
    NgramSimple,
    Draft,
    EarlyExit,
    /// The target with fewer routed experts per token (`--moe-draft-experts`).
    MoeDraft,
}

/// Why the flags do not describe a usable speculator.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    #[error(
        "--spec-type: unknown type {0:?} (known: none, draft-simple, ngram-simple, early-exit, \
         moe-draft)"
    )]
    UnknownType(String),
    #[error("--spec-type draft needs a draft model: -md FNAME")]
    NoDraftModel,
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
}

/// The draft sources the flags ask for, in the order they are tried.
pub fn spec_types(args: &SpecArgs) -> Result<Vec<SpecType>, SpecError> {
    let mut types = Vec::new();
    if let Some(list) = &args.spec_type {
        for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match name {
                "none" => {}
                "ngram-simple" => types.push(SpecType::NgramSimple),
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
    let order = [
        SpecType::NgramSimple,
        SpecType::Draft,
        SpecType::EarlyExit,
        SpecType::MoeDraft,
    ];
    Ok(order.into_iter().filter(|t| types.contains(t)).collect())
}

/// The speculator for `target`, with `draft` loaded when the types include a draft model.
/// `None` when no speculation was asked for.
pub fn build<'a>(
    args: &SpecArgs,
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
            SpecType::Draft => {
                let draft = draft.ok_or(SpecError::NoDraftModel)?;
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
pub fn moe_draft_plan(model: &Model, experts: Option<usize>) -> Result<ForwardPlan, SpecError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(argv: &[&str]) -> SpecArgs {
        let mut full = vec!["llamafile"];
        full.extend_from_slice(argv);
        crate::cli::parse(full.into_iter().map(Into::into).collect())
            .unwrap()
            .spec
    }

    #[test]
    fn types_in_trying_order() {
        assert_eq!(spec_types(&args(&[])).unwrap(), vec![]);
        assert_eq!(
            spec_types(&args(&[
                "--model-draft",
                "d.gguf",
                "--spec-type",
                "ngram-simple"
            ]))
            .unwrap(),
            vec![SpecType::NgramSimple, SpecType::Draft]
        );
        assert_eq!(
            spec_types(&args(&["--n-layer-exit-draft", "4"])).unwrap(),
            vec![SpecType::EarlyExit]
        );
        assert_eq!(
            spec_types(&args(&[
                "--moe-draft-experts",
                "0",
                "--spec-type",
                "ngram-simple"
            ]))
            .unwrap(),
            vec![SpecType::NgramSimple, SpecType::MoeDraft]
        );
        assert_eq!(
            spec_types(&args(&["--spec-type", "moe-draft"])).unwrap(),
            vec![SpecType::MoeDraft]
        );
        assert_eq!(spec_types(&args(&["--spec-type", "none"])).unwrap(), vec![]);
    }

    #[test]
    fn bad_flags_are_named() {
        assert_eq!(
            spec_types(&args(&["--spec-type", "ngram,draft"])),
            Err(SpecError::UnknownType("ngram".into()))
        );
        assert_eq!(
            spec_types(&args(&["--spec-type", "draft"])),
            Err(SpecError::NoDraftModel)
        );
        assert_eq!(
            spec_types(&args(&["--draft-p-min", "1.5"])),
            Err(SpecError::PMin(1.5))
        );
    }
}
