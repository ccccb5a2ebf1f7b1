//! Reading a [`VocabSpec`] out of GGUF metadata (`tokenizer.ggml.*`). Only gathers values; the
//! meaning of absent keys is decided in `load`.

use super::error::TokenizerError;
use super::spec::{SpecialIds, VocabSpec};
use crate::gguf::{Array, GgufFile};

const TOKENS: &str = "tokenizer.ggml.tokens";
const SCORES: &str = "tokenizer.ggml.scores";
const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const MERGES: &str = "tokenizer.ggml.merges";

impl VocabSpec {
    pub fn from_gguf(gguf: &GgufFile) -> Result<VocabSpec, TokenizerError> {
        let model = gguf
            .get_str("tokenizer.ggml.model")
            .ok_or(TokenizerError::MissingModel)?;
        let tokens = match gguf.get_array(TOKENS) {
            None => return Err(TokenizerError::NoTokens),
            Some(a) => a.as_strs().ok_or(TokenizerError::WrongType {
                key: TOKENS,
                expected: "string array",
            })?,
        };
        let scores = match gguf.get_array(SCORES) {
            None => None,
            Some(Array::F32(v)) => Some(v.clone()),
            // llama.cpp also accepts integer scores
            Some(Array::I32(v)) => Some(v.iter().map(|&s| s as f32).collect()),
            Some(_) => {
                return Err(TokenizerError::WrongType {
                    key: SCORES,
                    expected: "f32 or i32 array",
                })
            }
        };
        let token_types = match gguf.get_array(TOKEN_TYPE) {
            None => None,
            Some(a) => Some(
                a.as_i32s()
                    .ok_or(TokenizerError::WrongType {
                        key: TOKEN_TYPE,
                        expected: "i32 array",
                    })?
                    .to_vec(),
            ),
        };
        let merges = match gguf.get_array(MERGES) {
            None => None,
            Some(a) => Some(
                a.as_strs()
                    .ok_or(TokenizerError::WrongType {
                        key: MERGES,
                        expected: "string array",
                    })?
                    .to_vec(),
            ),
        };
        let id = |name: &str| gguf.get_u32(&format!("tokenizer.ggml.{name}"));
        let ids = SpecialIds {
            bos: id("bos_token_id"),
            eos: id("eos_token_id"),
            eot: id("eot_token_id"),
            eom: id("eom_token_id"),
            unk: id("unknown_token_id"),
            // sic: llama.cpp's key is spelled this way
            sep: id("seperator_token_id"),
            pad: id("padding_token_id"),
            mask: id("mask_token_id"),
            fim_pre: id("fim_pre_token_id").or_else(|| id("prefix_token_id")),
            fim_suf: id("fim_suf_token_id").or_else(|| id("suffix_token_id")),
            fim_mid: id("fim_mid_token_id").or_else(|| id("middle_token_id")),
            fim_pad: id("fim_pad_token_id"),
            fim_rep: id("fim_rep_token_id"),
            fim_sep: id("fim_sep_token_id"),
        };
        Ok(VocabSpec {
            model: model.to_string(),
            pre: gguf.get_str("tokenizer.ggml.pre").map(str::to_string),
            tokens: tokens.to_vec(),
            scores,
            token_types,
            merges,
            ids,
            add_bos: gguf.get_bool("tokenizer.ggml.add_bos_token"),
            add_eos: gguf.get_bool("tokenizer.ggml.add_eos_token"),
            add_space_prefix: gguf.get_bool("tokenizer.ggml.add_space_prefix"),
            add_sep: gguf.get_bool("tokenizer.ggml.add_sep_token"),
            lowercase: gguf.get_bool("tokenizer.ggml.normalizer.lowercase"),
            strip_accents: gguf.get_bool("tokenizer.ggml.normalizer.strip_accents"),
        })
    }
}
