//! Speculative decoding flags, as llama.cpp names them.

use clap::Args;

/// Speculative decoding flags (llama.cpp's names and their older aliases).
#[derive(Args, Debug, Clone)]
pub struct SpecArgs {
    /// Draft model for speculative decoding (same vocabulary as the target).
    #[arg(long = "model-draft", visible_aliases = ["spec-draft-model"], value_name = "FNAME")]
    pub model_draft: Option<String>,

    /// Draft sources, comma-separated: none, draft-simple (the draft model; implied by -md),
    /// ngram-simple (look the last tokens up in the context), early-exit (implied by
    /// --n-layer-exit-draft).
    #[arg(long = "spec-type", value_name = "TYPES")]
    pub spec_type: Option<String>,

    /// Most tokens drafted per step.
    #[arg(long = "spec-draft-n-max", visible_aliases = ["draft-max", "draft", "draft-n"], default_value_t = 16)]
    pub draft_max: usize,

    /// Drafts shorter than this are not verified.
    #[arg(long = "spec-draft-n-min", visible_aliases = ["draft-min", "draft-n-min"], default_value_t = 0)]
    pub draft_min: usize,

    /// A model draft stops when its best token is less likely than this.
    #[arg(
        long = "spec-draft-p-min",
        visible_alias = "draft-p-min",
        default_value_t = 0.75
    )]
    pub draft_p_min: f32,

    /// ngram-simple: length of the n-gram looked up.
    #[arg(long = "spec-ngram-simple-size-n", default_value_t = 12)]
    pub ngram_size_n: usize,

    /// ngram-simple: most tokens proposed after a match.
    #[arg(long = "spec-ngram-simple-size-m", default_value_t = 48)]
    pub ngram_size_m: usize,

    /// Self-speculative decoding: draft with the target's first N layers.
    #[arg(long = "n-layer-exit-draft", value_name = "N")]
    pub n_layer_exit_draft: Option<usize>,
}
