//! A sequence's results do not depend on which other sequences share its forward pass: a
//! greedy decode alone and the same decode batched next to a long prompt of another sequence
//! (as when a server slot decodes while a new request's prompt is fed) give the same logits bit
//! for bit, so the same tokens. The attention path is chosen per sequence run, not per batch.

mod common;

use common::model_path;
use llamafile::engine::load_model;
use llamafile::model::Batch;

const STEPS: usize = 6;

#[test]
fn decoding_beside_a_long_prompt_gives_the_same_logits() {
    let Some(path) = model_path("SmolLM2-135M-Instruct.Q4_1") else {
        return;
    };
    let loaded = load_model(path.to_str().unwrap(), None).expect("model loads");
    let model = &loaded.model;
    let n_vocab = model.config.n_vocab;
    let prompt: Vec<u32> = (0..12).map(|i| 100 + 37 * i).collect();
    let other: Vec<u32> = (0..96).map(|i| 200 + 11 * i).collect();

    let argmax = |l: &[f32]| {
        l.iter()
            .enumerate()
            .fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b })
            .0 as u32
    };
    let decode = |beside: bool| -> Vec<Vec<u32>> {
        let mut caches = vec![model.new_cache(256), model.new_cache(256)];
        let first = model.forward(&Batch::sequence(&prompt, 0, false), &mut caches[..1]);
        let mut tok = argmax(&first);
        let mut out = Vec::new();
        for step in 0..STEPS {
            let pos = prompt.len() + step;
            let mut batch = Batch {
                tokens: vec![tok],
                pos: vec![pos],
                seq: vec![0],
                logits: vec![true],
                bidirectional: false,
                rope_pos: Vec::new(),
            };
            // Beside: two 16-token chunks of another sequence's prompt, then its remaining
            // 64 tokens as one run, which takes the tiled attention path.
            let chunks = [0..16, 16..32, 32..96];
            if beside && step < chunks.len() {
                for i in chunks[step].clone() {
                    batch.tokens.push(other[i]);
                    batch.pos.push(i);
                    batch.seq.push(1);
                    batch.logits.push(false);
                }
            }
            let logits = model.forward(&batch, &mut caches);
            assert_eq!(logits.len(), n_vocab);
            out.push(logits.iter().map(|v| v.to_bits()).collect());
            tok = argmax(&logits);
        }
        out
    };
    let alone = decode(false);
    let beside = decode(true);
    for (step, (a, b)) in alone.iter().zip(&beside).enumerate() {
        assert!(
            a == b,
            "step {step}: logits differ when batched beside another prompt"
        );
    }
}
