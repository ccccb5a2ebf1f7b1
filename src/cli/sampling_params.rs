//! The sampling flags as the sampler's settings: temperature and the truncations, penalties,
//! DRY, Mirostat, the sampler order, `--logit-bias`, and the grammar of `--grammar`,
//! `--grammar-file`, `--json-schema` or `--json-schema-file`.

use super::Cli;
use crate::escapes::process_escapes;
use crate::sampling::grammar::json_schema;
use crate::sampling::{resolve_seed, Grammar, SamplerKind, SamplingParams};
use anyhow::{anyhow, bail, Context, Result};
use std::sync::Arc;

impl Cli {
    /// `--seed` by the one seed rule (-1: a fresh random seed).
    pub fn resolved_seed(&self) -> u64 {
        resolve_seed(self.seed)
    }

    /// The sampling flags as validated settings, drawing with `seed`.
    pub fn sampling_params(&self, seed: u64) -> Result<SamplingParams> {
        let mut p = SamplingParams {
            temperature: self.temp,
            dynatemp_range: self.dynatemp_range,
            dynatemp_exponent: self.dynatemp_exp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            typical_p: self.typical,
            top_n_sigma: self.top_n_sigma,
            xtc_probability: self.xtc_probability,
            xtc_threshold: self.xtc_threshold,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: self.repeat_last_n,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            dry_multiplier: self.dry_multiplier,
            dry_base: self.dry_base,
            dry_allowed_length: self.dry_allowed_length,
            dry_penalty_last_n: self.dry_penalty_last_n,
            mirostat: self.mirostat,
            mirostat_tau: self.mirostat_ent,
            mirostat_eta: self.mirostat_lr,
            seed,
            ..SamplingParams::default()
        };
        if self.mirostat > 2 {
            bail!("--mirostat must be 0, 1 or 2, not {}", self.mirostat);
        }
        if !self.dry_sequence_breaker.is_empty() {
            p.dry_sequence_breakers = if self.dry_sequence_breaker == ["none"] {
                Vec::new()
            } else {
                self.dry_sequence_breaker
                    .iter()
                    .map(|b| process_escapes(b))
                    .collect()
            };
        }
        // Cli::settle keeps only the later of --samplers and --sampling-seq.
        if let Some(list) = &self.samplers {
            p.samplers = SamplerKind::parse_list(list).map_err(|e| anyhow!("--samplers: {e}"))?;
        } else if let Some(seq) = &self.sampling_seq {
            p.samplers =
                SamplerKind::parse_letters(seq).map_err(|e| anyhow!("--sampling-seq: {e}"))?;
        }
        for b in &self.logit_bias {
            p.logit_bias.push(parse_logit_bias(b)?);
        }
        p.grammar = self.grammar()?.map(Arc::new);
        Ok(p)
    }

    /// The grammar from --grammar, --grammar-file, --json-schema or --json-schema-file
    /// (Cli::settle keeps only the last of them given).
    fn grammar(&self) -> Result<Option<Grammar>> {
        let read = |p: &std::path::Path| {
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))
        };
        let gbnf =
            |flag: &str, text: &str| Grammar::parse(text).map_err(|e| anyhow!("{flag}: {e}"));
        let schema = |flag: &str, text: &str| {
            let schema: serde_json::Value =
                serde_json::from_str(text).map_err(|e| anyhow!("{flag}: not valid JSON: {e}"))?;
            json_schema::to_grammar(&schema).map_err(|e| anyhow!("{flag}: {e}"))
        };
        let grammar = if let Some(g) = &self.grammar {
            gbnf("--grammar", g)?
        } else if let Some(f) = &self.grammar_file {
            gbnf(&format!("--grammar-file {}", f.display()), &read(f)?)?
        } else if let Some(s) = &self.json_schema {
            schema("--json-schema", s)?
        } else if let Some(f) = &self.json_schema_file {
            schema(&format!("--json-schema-file {}", f.display()), &read(f)?)?
        } else {
            return Ok(None);
        };
        Ok(Some(grammar))
    }
}

/// llama.cpp's `--logit-bias TOKEN_ID(+/-)BIAS`.
fn parse_logit_bias(text: &str) -> Result<(u32, f32)> {
    let bad =
        || anyhow!("--logit-bias {text}: expected TOKEN_ID(+/-)BIAS, e.g. 15043+1 or 15043-inf");
    let at = text.find(['+', '-']).ok_or_else(bad)?;
    let id: u32 = text[..at].parse().map_err(|_| bad())?;
    let bias: f32 = text[at..].parse().map_err(|_| bad())?;
    if bias.is_nan() {
        return Err(bad());
    }
    Ok((id, bias))
}
