//! The engine against llama.cpp on the four real models (`tests/data/reference`): teacher-forced
//! logits, free-running greedy generation and perplexity.

mod common;

use common::{model_path, reference, reference_dir, reference_ppl, MODELS};
use llamafile::engine::session::Session;
use llamafile::sampling::{Sampler, SamplingParams, TokenVocab};
use std::sync::Arc;

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn load(stem: &str) -> Option<llamafile::engine::Loaded> {
    let path = model_path(stem)?;
    Some(llamafile::engine::load_model(path.to_str().unwrap(), None).expect("model loads"))
}

/// Feeds each prompt plus llama.cpp's generated tokens and compares every step's logits.
fn teacher_forced(stem: &str, noise: f64) {
    let Some(m) = load(stem) else { return };
    let r = reference(stem);
    let n_vocab = m.model.config.n_vocab;
    let (mut steps, mut same, mut diff_sum, mut diff_n) = (0usize, 0usize, 0f64, 0usize);
    for g in r["generate"].as_array().unwrap() {
        let prompt = ids(&g["prompt_ids"]);
        let ref_steps = g["steps"].as_array().unwrap();
        let forced: Vec<u32> = ref_steps
            .iter()
            .map(|s| s["id"].as_u64().unwrap() as u32)
            .collect();
        let mut s = Session::new(&m.model, 1024, 512);
        s.feed(&prompt[..prompt.len() - 1], false).unwrap();
        let mut tail = vec![*prompt.last().unwrap()];
        tail.extend_from_slice(&forced[..forced.len() - 1]);
        let logits = s.feed(&tail, true).unwrap();
        for (i, st) in ref_steps.iter().enumerate() {
            let row = &logits[i * n_vocab..(i + 1) * n_vocab];
            let argmax = (0..n_vocab)
                .max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a)))
                .unwrap();
            steps += 1;
            same += (argmax as u64 == st["id"].as_u64().unwrap()) as usize;
            for t in st["top"].as_array().unwrap() {
                let (id, lg) = (t[0].as_u64().unwrap() as usize, t[1].as_f64().unwrap());
                diff_sum += (row[id] as f64 - lg).abs();
                diff_n += 1;
            }
        }
    }
    let agree = same as f64 / steps as f64;
    let mean = diff_sum / diff_n as f64;
    eprintln!(
        "{stem}: argmax agreement {:.1}% over {steps} steps, mean |dlogit| {mean:.4} (limit {:.4})",
        agree * 100.0,
        2.0 * noise
    );
    assert!(
        agree >= 0.97,
        "{stem}: argmax agrees with llama.cpp at only {:.1}% of steps",
        agree * 100.0
    );
    assert!(
        mean <= 2.0 * noise,
        "{stem}: mean |dlogit| {mean:.4} exceeds twice llama.cpp's own noise {noise}"
    );
}

/// Greedy generation follows llama.cpp until a divergence, which must be at a near-tie.
fn free_running(stem: &str) {
    let Some(m) = load(stem) else { return };
    let r = reference(stem);
    for g in r["generate"].as_array().unwrap() {
        let prompt = m
            .tokenizer
            .encode(g["prompt"].as_str().unwrap(), true, true);
        assert_eq!(prompt, ids(&g["prompt_ids"]), "{stem}: prompt tokenization");
        let ref_steps = g["steps"].as_array().unwrap();
        let mut s = Session::new(&m.model, 1024, 512);
        let logits = s.feed(&prompt, false).unwrap();
        let mut sampler = Sampler::new(
            SamplingParams {
                temperature: 0.0,
                ..Default::default()
            },
            Arc::new(TokenVocab::new(&m.tokenizer)),
        );
        let mut ours = Vec::new();
        s.generate(
            logits,
            &mut sampler,
            ref_steps.len() as i64,
            |id| m.tokenizer.is_eog(id),
            |ev| {
                ours.push(ev.id);
                true
            },
        )
        .unwrap();
        for (i, st) in ref_steps.iter().enumerate() {
            let want = st["id"].as_u64().unwrap() as u32;
            let Some(&got) = ours.get(i) else {
                panic!("{stem}: stopped after {i} tokens, llama.cpp went on")
            };
            if got != want {
                let top = st["top"].as_array().unwrap();
                let gap = top[0][1].as_f64().unwrap() - top[1][1].as_f64().unwrap();
                eprintln!(
                    "{stem}: {:?} diverged at step {i}, llama.cpp's gap {gap:.3}",
                    g["prompt"]
                        .as_str()
                        .unwrap()
                        .chars()
                        .take(30)
                        .collect::<String>()
                );
                assert!(gap < 1.0, "{stem}: diverged from llama.cpp at step {i} where its top-2 gap was {gap:.3} (not a near-tie)");
                break;
            }
        }
    }
}

fn perplexity(stem: &str) {
    let Some(m) = load(stem) else { return };
    let text = std::fs::read_to_string(reference_dir().join("ppl-text.txt")).unwrap();
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let tokens = m.tokenizer.encode(text, true, false);
    let bos = m.tokenizer.add_bos().then(|| m.tokenizer.bos()).flatten();
    let res =
        llamafile::perplexity::perplexity(&m.model, &tokens, 256, 256, bos, &mut std::io::sink())
            .unwrap();
    let want = reference_ppl(stem);
    eprintln!(
        "{stem}: PPL {:.4} vs llama.cpp {want:.4} over {} chunks",
        res.ppl, res.chunks
    );
    assert!(
        (res.ppl / want - 1.0).abs() <= 0.01,
        "{stem}: perplexity {:.4} is not within 1% of llama.cpp's {want}",
        res.ppl
    );
}

macro_rules! model_tests {
    ($($name:ident => $idx:expr $(, #[$tf_attr:meta])?);* $(;)?) => {$(
        mod $name {
            use super::*;
            #[test]
            $(#[$tf_attr])?
            fn teacher_forced_logits() { teacher_forced(MODELS[$idx].0, MODELS[$idx].1) }
            #[test]
            fn greedy_follows_reference() { free_running(MODELS[$idx].0) }
            #[test]
            fn perplexity_within_one_percent() { perplexity(MODELS[$idx].0) }
        }
    )*};
}

// SmolLM2-135M Q4_1 is chaotic at the rounding level (1e-7 relative noise on any activation
// moves its logits by ~0.15), so it passes only because the kernels reproduce ggml's float
// order bit for bit (RoPE's fused multiply-adds, the flash-attention f16 pipeline, the Q4_1
// lane order and SiLU's vector expf): a regression there shows up here first.
model_tests!(
    smollm2 => 0;
    gemma3 => 1;
    qwen05 => 2;
    qwen15 => 3;
);
