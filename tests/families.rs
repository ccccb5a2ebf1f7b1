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

use common::synth::{families_dir, index, synth_model};
use llamafile::engine::PlacedModel;
use llamafile::gguf::GgufFile;
use llamafile::model::Batch;
use std::sync::Arc;

/// One position of llama.cpp's reference: its top ids and logits, and the fixed sample's logits.
struct RefRow {
    top: Vec<(usize, f32)>,
    sample: Vec<f32>,
}

fn read_rows(name: &str, k: usize, n_sample: usize) -> Vec<RefRow> {
    let bytes = std::fs::read(families_dir().join(format!("{name}.bin"))).unwrap();
    let word = |i: usize| <[u8; 4]>::try_from(&bytes[4 * i..4 * i + 4]).unwrap();
    let per_row = 2 * k + n_sample;
    assert_eq!(bytes.len() % (4 * per_row), 0, "{name}.bin: truncated");
    (0..bytes.len() / (4 * per_row))
        .map(|r| {
            let base = r * per_row;
            RefRow {
                top: (0..k)
                    .map(|j| {
                        (
                            u32::from_le_bytes(word(base + j)) as usize,
                            f32::from_le_bytes(word(base + k + j)),
                        )
                    })
                    .collect(),
                sample: (0..n_sample)
                    .map(|j| f32::from_le_bytes(word(base + 2 * k + j)))
                    .collect(),
            }
        })
        .collect()
}

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
        let rows = read_rows(name, k, sample.len());
        let mut r = 0;
        let (mut diff_sum, mut diff_n, mut agree) = (0f64, 0usize, 0usize);
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
                let want = &rows[r];
                r += 1;
                let argmax = (0..n_vocab)
                    .max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a)))
                    .unwrap();
                agree += (argmax == want.top[0].0) as usize;
                let pairs = want
                    .top
                    .iter()
                    .copied()
                    .chain(sample.iter().copied().zip(want.sample.iter().copied()));
                for (id, lg) in pairs {
                    diff_sum += (row[id] as f64 - lg as f64).abs();
                    diff_n += 1;
                }
            }
        }
        assert_eq!(r, rows.len(), "{name}: positions");
        let mean = diff_sum / diff_n as f64;
        let noise = set["noise_mean_abs"].as_f64().unwrap();
        let noise_agree = set["noise_argmax_agree"].as_f64().unwrap();
        let agreement = agree as f64 / r as f64;
        eprintln!(
            "{name}: mean |dlogit| {mean:.5} (llama.cpp's own noise {noise:.5}), argmax \
             agreement {agree}/{r} (llama.cpp's own {:.1}%)",
            noise_agree * 100.0
        );
        assert!(
            mean <= 2.0 * noise,
            "{name}: mean |dlogit| {mean:.5} exceeds twice llama.cpp's own noise {noise:.5}"
        );
        assert!(
            agreement >= noise_agree - 0.03,
            "{name}: argmax agrees with llama.cpp at {:.1}% of positions, llama.cpp with itself \
             at {:.1}%",
            agreement * 100.0,
            noise_agree * 100.0
        );
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
