//! Speculative decoding flags, as llama.cpp names them: the ones acted on ([`SpecArgs`]) and,
//! in [`FLAGS`], the ones accepted without effect, or refused where they would ask for what is
//! not built.

use super::table::{equals, valued, Check, Effect, Flag};
use crate::engine::speculative::setup::{MapOptions, SpecOptions};
use clap::Args;

/// Speculative decoding flags (llama.cpp's names and their older aliases).
#[derive(Args, Debug, Clone)]
pub struct SpecArgs {
    /// Draft model for speculative decoding (same vocabulary as the target).
    #[arg(long = "model-draft", visible_aliases = ["spec-draft-model"], value_name = "FNAME", env = "LLAMA_ARG_SPEC_DRAFT_MODEL")]
    pub model_draft: Option<String>,

    /// Draft sources, comma-separated: none, draft-simple (the draft model; implied by -md),
    /// ngram-simple (look the last tokens up in the context), ngram-map-k and ngram-map-k4v
    /// (the same through a map of the context's n-grams; k4v with continuation statistics),
    /// ngram-mod (a hashed n-gram pool shared by all server slots), ngram-cache (lookup
    /// decoding, with -lcs/-lcd cache files), early-exit (implied by --n-layer-exit-draft),
    /// moe-draft (implied by --moe-draft-experts).
    #[arg(long = "spec-type", value_name = "TYPES", env = "LLAMA_ARG_SPEC_TYPE")]
    pub spec_type: Option<String>,

    /// Most tokens a draft model drafts per step (the n-gram types have their own sizes).
    #[arg(long = "spec-draft-n-max", visible_aliases = ["draft-max", "draft", "draft-n"], default_value_t = 16, env = "LLAMA_ARG_SPEC_DRAFT_N_MAX")]
    pub draft_max: usize,

    /// A draft model's drafts shorter than this are not verified.
    #[arg(long = "spec-draft-n-min", visible_aliases = ["draft-min", "draft-n-min"], default_value_t = 0, env = "LLAMA_ARG_SPEC_DRAFT_N_MIN")]
    pub draft_min: usize,

    /// A model draft stops when its best token is less likely than this.
    #[arg(
        long = "spec-draft-p-min",
        visible_alias = "draft-p-min",
        default_value_t = 0.75,
        env = "LLAMA_ARG_SPEC_DRAFT_P_MIN"
    )]
    pub draft_p_min: f32,

    /// ngram-simple: length of the n-gram looked up.
    #[arg(
        long = "spec-ngram-simple-size-n",
        visible_alias = "spec-ngram-size-n",
        default_value_t = 12
    )]
    pub ngram_size_n: usize,

    /// ngram-simple: most tokens proposed after a match.
    #[arg(
        long = "spec-ngram-simple-size-m",
        visible_alias = "spec-ngram-size-m",
        default_value_t = 48
    )]
    pub ngram_size_m: usize,

    /// ngram-map-k: length of the n-gram looked up.
    #[arg(
        long = "spec-ngram-map-k-size-n",
        value_name = "N",
        default_value_t = 12
    )]
    pub map_k_size_n: usize,

    /// ngram-map-k: most tokens proposed after a match.
    #[arg(
        long = "spec-ngram-map-k-size-m",
        value_name = "N",
        default_value_t = 48
    )]
    pub map_k_size_m: usize,

    /// ngram-map-k: minimum key hits (as in llama.cpp, this type drafts after any hit).
    #[arg(
        long = "spec-ngram-map-k-min-hits",
        value_name = "N",
        default_value_t = 1
    )]
    pub map_k_min_hits: u16,

    /// ngram-map-k4v: length of the n-gram looked up.
    #[arg(
        long = "spec-ngram-map-k4v-size-n",
        value_name = "N",
        default_value_t = 12
    )]
    pub map_k4v_size_n: usize,

    /// ngram-map-k4v: most tokens proposed after a match.
    #[arg(
        long = "spec-ngram-map-k4v-size-m",
        value_name = "N",
        default_value_t = 48
    )]
    pub map_k4v_size_m: usize,

    /// ngram-map-k4v: times a key must have been looked up before it drafts.
    #[arg(
        long = "spec-ngram-map-k4v-min-hits",
        value_name = "N",
        default_value_t = 1
    )]
    pub map_k4v_min_hits: u16,

    /// ngram-mod: drafts shorter than this are dropped.
    #[arg(long = "spec-ngram-mod-n-min", value_name = "N", default_value_t = 48)]
    pub mod_n_min: usize,

    /// ngram-mod: most tokens drafted per step.
    #[arg(long = "spec-ngram-mod-n-max", value_name = "N", default_value_t = 64)]
    pub mod_n_max: usize,

    /// ngram-mod: length of the n-grams hashed and looked up.
    #[arg(
        long = "spec-ngram-mod-n-match",
        value_name = "N",
        default_value_t = 24
    )]
    pub mod_n_match: usize,

    /// ngram-cache: static lookup cache (llama-lookup-create's file; not updated).
    #[arg(long = "lookup-cache-static", value_name = "FNAME")]
    pub lookup_cache_static: Option<String>,

    /// ngram-cache: dynamic lookup cache (read if present; the CLI adds each generation's
    /// n-grams to it and rewrites it).
    #[arg(long = "lookup-cache-dynamic", value_name = "FNAME")]
    pub lookup_cache_dynamic: Option<String>,

    /// Self-speculative decoding: draft with the target's first N layers.
    #[arg(long = "n-layer-exit-draft", value_name = "N")]
    pub n_layer_exit_draft: Option<usize>,

    /// Self-speculative decoding of a mixture-of-experts model: draft with N routed experts per
    /// token instead of the model's k (0: the shared experts only; default 0 when the model has
    /// shared experts, else 1).
    #[arg(long = "moe-draft-experts", value_name = "N")]
    pub moe_draft_experts: Option<usize>,
}

impl SpecArgs {
    /// The settings these flags ask for.
    pub fn options(&self) -> SpecOptions {
        SpecOptions {
            model_draft: self.model_draft.clone(),
            spec_type: self.spec_type.clone(),
            draft_max: self.draft_max,
            draft_min: self.draft_min,
            draft_p_min: self.draft_p_min,
            ngram_size_n: self.ngram_size_n,
            ngram_size_m: self.ngram_size_m,
            map_k: MapOptions {
                size_n: self.map_k_size_n,
                size_m: self.map_k_size_m,
                min_hits: self.map_k_min_hits,
            },
            map_k4v: MapOptions {
                size_n: self.map_k4v_size_n,
                size_m: self.map_k4v_size_m,
                min_hits: self.map_k4v_min_hits,
            },
            mod_n_min: self.mod_n_min,
            mod_n_max: self.mod_n_max,
            mod_n_match: self.mod_n_match,
            lookup_cache_static: self.lookup_cache_static.clone(),
            lookup_cache_dynamic: self.lookup_cache_dynamic.clone(),
            n_layer_exit_draft: self.n_layer_exit_draft,
            moe_draft_experts: self.moe_draft_experts,
        }
    }

    /// llama.cpp's older variables for the draft sizes, read when neither the flag nor its
    /// current variable is given.
    pub fn resolve(&mut self, m: &clap::ArgMatches) -> Result<(), String> {
        use clap::parser::ValueSource;
        for (id, old, field) in [
            ("draft_max", "LLAMA_ARG_DRAFT_MAX", &mut self.draft_max),
            ("draft_min", "LLAMA_ARG_DRAFT_MIN", &mut self.draft_min),
        ] {
            if m.value_source(id) != Some(ValueSource::DefaultValue) {
                continue;
            }
            if let Some(v) = std::env::var_os(old) {
                let v = v.to_string_lossy();
                *field = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("{old}={v}: expected a number of tokens"))?;
            }
        }
        Ok(())
    }
}

fn one(v: &str) -> bool {
    equals(v, 1.0)
}

/// Speculative flags accepted without effect, or refused.
pub const FLAGS: &[Flag] = &[
    valued(
        &["spec-synth-len"],
        &[],
        "L",
        Check::Float,
        Some("LLAMA_ARG_SPEC_SYNTH_LEN"),
        Effect::Refused("synthetic draft acceptance (a benchmarking aid)"),
    ),
    valued(
        &["spec-synth-rates"],
        &[],
        "P0,P1,...",
        Check::Floats,
        Some("LLAMA_ARG_SPEC_SYNTH_RATES"),
        Effect::Refused("synthetic draft acceptance (a benchmarking aid)"),
    ),
    valued(
        &["spec-draft-p-split", "draft-p-split"],
        &[],
        "P",
        Check::Float,
        Some("LLAMA_ARG_SPEC_DRAFT_P_SPLIT"),
        Effect::NoOp("drafts are single sequences here, never split into trees"),
    ),
    valued(
        &["spec-ngram-simple-min-hits", "spec-ngram-min-hits"],
        &[],
        "N",
        Check::Int,
        None,
        Effect::NoOpIf(
            one,
            "1 (one earlier occurrence is enough here)",
            "a minimum n-gram hit count",
        ),
    ),
];

#[cfg(test)]
mod tests {
    use crate::engine::speculative::setup::{spec_types, SpecError, SpecOptions, SpecType};

    fn args(argv: &[&str]) -> SpecOptions {
        let mut full = vec!["llamafile"];
        full.extend_from_slice(argv);
        super::super::parse(full.into_iter().map(Into::into).collect())
            .unwrap()
            .spec
            .options()
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
