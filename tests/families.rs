//! The architecture families (dense and mixture-of-experts) against llama.cpp, on the synthetic models of
//! `tools/synth-model.py` (no small real GGUF of these families exists in a package registry).
//!
//! For each family and weight type, three token sequences (1, 20 and 200 ids) are fed as one
//! batch with every position's logits, as `tools/llama-ref-logits.cpp` fed them to llama.cpp, and
//! compared with llama.cpp's logits in `tests/data/families/` (see its README): the mean |dlogit|
//! over the stored ids must stay within twice llama.cpp's own batched-vs-single-token noise on
//! that model, and the argmax must agree about as often as llama.cpp agrees with itself.
//!
//! The models are generated on first use into `~/.cache/llamafile-rs/synth` (or
//! `$LLAMAFILE_SYNTH`) and checked against the SHA-256 the references were made from.

mod common;

use common::logit_refs::{read_rows, Agreement};
use common::synth::{families_dir, index, synth_model};
use llamafile::engine::PlacedModel;
use llamafile::gguf::GgufFile;
use llamafile::model::Batch;
use std::sync::Arc;

/// Compares every reference set of `family` (both weight types, every context size).
fn check_family(family: &str) {
    let idx = index();
    let k = idx["top_k"].as_u64().unwrap() as usize;
    let sample: Vec<usize> = idx["sample_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let sets: Vec<&serde_json::Value> = idx["sets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["family"] == family)
        .collect();
    assert!(!sets.is_empty(), "no reference sets for {family}");
    for set in sets {
        let name = set["name"].as_str().unwrap();
        let ty = set["type"].as_str().unwrap();
        let Some(path) = synth_model(family, ty, set["model_sha256"].as_str().unwrap()) else {
            return;
        };
        let file = Arc::new(GgufFile::open(&path).unwrap());
        let model = PlacedModel::load(file).unwrap_or_else(|e| panic!("{name}: {e}"));
        let n_vocab = model.config.n_vocab;
        let n_ctx = set["n_ctx"].as_u64().unwrap() as usize;
        let rows = read_rows(&families_dir(), name, k, sample.len());
        let mut verdict = Agreement::default();
        for prompt in set["prompts"].as_array().unwrap() {
            let ids: Vec<u32> = prompt
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            let mut cache = [model.new_cache(n_ctx)];
            let logits = model.forward(&Batch::sequence(&ids, 0, true), &mut cache);
            for row in logits.chunks_exact(n_vocab) {
                verdict.add(row, &rows[verdict.rows()], &sample);
            }
        }
        assert_eq!(verdict.rows(), rows.len(), "{name}: positions");
        verdict.assert_within_noise(name, set);
    }
}

#[test]
fn mistral_style_llama() {
    check_family("mistral");
}

#[test]
fn llama3_rope_freqs() {
    check_family("llama3");
}

#[test]
fn qwen3_qk_norm() {
    check_family("qwen3");
}

#[test]
fn gemma2_softcaps_and_sliding_window() {
    check_family("gemma2");
}

#[test]
fn phi3_fused_tensors_and_longrope() {
    check_family("phi3");
}

#[test]
fn mixtral_style_llama_experts() {
    check_family("mixtral");
}

#[test]
fn qwen2moe_shared_expert() {
    check_family("qwen2moe");
}

#[test]
fn qwen3moe_normalised_experts() {
    check_family("qwen3moe");
}

#[test]
fn deepseek2_latent_attention_yarn_and_shared_experts() {
    check_family("deepseek2");
}

#[test]
fn deepseek3_style_sigmoid_groups_and_selection_bias() {
    check_family("deepseek3");
}
