//! Constrained-decoding speed on SmolLM2 (a benchmark, not a timed test: it only prints).
//! Run: `cargo test --release --test sampling_bench -- --ignored --nocapture`.
//!
//! Prints tokens per second without a grammar, under the JSON grammar and under a JSON schema,
//! and the cost of one full vocabulary mask (the slow path taken when the sampled token is
//! rejected).

mod common;

use llamafile::engine::load_model;
use llamafile::engine::session::Session;
use llamafile::sampling::grammar::json_schema;
use llamafile::sampling::{Grammar, Sampler, SamplingParams, TokenVocab};
use std::sync::Arc;
use std::time::Instant;

#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn constrained_vs_unconstrained_decoding() {
    let Some(p) = common::model_path("SmolLM2-135M-Instruct.Q4_1") else {
        return;
    };
    let m = load_model(p.to_str().unwrap(), None).unwrap();
    let vocab = Arc::new(TokenVocab::new(&m.tokenizer));
    let prompt = m.tokenizer.encode(
        "<|im_start|>user\nDescribe three cats as JSON.<|im_end|>\n<|im_start|>assistant\n",
        true,
        true,
    );
    let json = Grammar::parse(llamafile::sampling::grammar::JSON_OBJECT_GBNF).unwrap();
    let schema = serde_json::json!({"type": "object", "properties": {"cats": {"type": "array",
        "items": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer",
        "minimum": 0, "maximum": 30}}, "required": ["name", "age"]}}}, "required": ["cats"]});
    let schema = Grammar::parse(&json_schema::to_gbnf(&schema).unwrap()).unwrap();
    let t0 = Instant::now();
    let _ = vocab.trie();
    println!(
        "vocabulary trie: {} nodes, built in {:?}",
        vocab.trie().len(),
        t0.elapsed()
    );
    for (name, grammar) in [
        ("none", None),
        ("json", Some(json)),
        ("schema", Some(schema)),
    ] {
        let params = SamplingParams {
            temperature: 0.8,
            seed: 1,
            grammar: grammar.map(Arc::new),
            ..Default::default()
        };
        let mut best = f64::MAX;
        let mut n_tokens = 0;
        for _ in 0..3 {
            let mut session = Session::new(&m.model, 2048, 512);
            let logits = session.feed(&prompt, false).unwrap();
            let mut sampler = Sampler::new(params.clone(), vocab.clone());
            let mut n = 0;
            let t = Instant::now();
            session
                .generate(
                    logits,
                    &mut sampler,
                    128,
                    |_| false,
                    |_| {
                        n += 1;
                        true
                    },
                )
                .unwrap();
            let per = t.elapsed().as_secs_f64() / n as f64;
            best = best.min(per);
            n_tokens = n;
        }
        println!(
            "grammar {name:>6}: {n_tokens} tokens, {:.1} tokens/s (best of 3)",
            1.0 / best
        );
    }
    // The slow path alone: a full mask in the middle of a JSON string.
    let g = Arc::new(Grammar::parse(llamafile::sampling::grammar::JSON_OBJECT_GBNF).unwrap());
    let mut m2 = llamafile::sampling::grammar::Matcher::new(g);
    assert!(m2.advance(b"{\"name\": \"Tom"));
    let mut allowed = 0;
    let t = Instant::now();
    let reps = 50;
    for _ in 0..reps {
        allowed = 0;
        vocab.trie().allowed(&mut m2, |_| allowed += 1);
    }
    println!(
        "full mask inside a JSON string: {allowed} of {} tokens allowed, {:.0} us per mask",
        vocab.n_vocab(),
        t.elapsed().as_secs_f64() * 1e6 / reps as f64
    );
}
