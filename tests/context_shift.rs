//! Context shifting (`--context-shift`, `--keep`): a full context drops the older half of the
//! tokens after the kept prefix and generation goes on; the moved keys are re-rotated so that
//! they equal keys computed afresh at their new positions.

mod common;

use common::{llamafile, model_path};
use llamafile::engine::load_model;
use llamafile::engine::session::Session;

const SMOLLM: &str = "SmolLM2-135M-Instruct.Q4_1";

#[test]
fn shifted_keys_equal_fresh_keys_at_the_new_positions() {
    let Some(path) = model_path(SMOLLM) else {
        return;
    };
    let m = load_model(path.to_str().unwrap(), None).unwrap();
    let tokens = m.tokenizer.encode(
        "The quick brown fox jumps over the lazy dog while the cat sleeps on a warm mat by the door of the old house",
        true,
        false,
    );
    assert!(tokens.len() >= 20, "{}", tokens.len());
    let keep = 3;
    let mut shifted = Session::new(&m.model, 64, 512);
    shifted.feed(&tokens, false).unwrap();
    shifted.context_shift = Some(keep);
    assert!(llamafile::engine::session::shift_context(
        &m.model,
        &mut shifted.cache,
        &mut shifted.tokens,
        keep
    )
    .unwrap());
    let discard_done = tokens.len() - shifted.tokens.len();
    assert_eq!(discard_done, (tokens.len() - keep) / 2);
    let mut fresh = Session::new(&m.model, 64, 512);
    fresh.feed(&shifted.tokens.clone(), false).unwrap();
    // Layer 0's keys depend only on the token and its position; values only on the token.
    let kv = m.model.config.kv_dim();
    let n = shifted.tokens.len();
    let (ka, kb) = (
        &shifted.cache.keys(0)[..n * kv],
        &fresh.cache.keys(0)[..n * kv],
    );
    let worst = ka
        .iter()
        .zip(kb)
        .map(|(a, b)| (a.to_f32() - b.to_f32()).abs() / (1.0 + b.to_f32().abs()))
        .fold(0f32, f32::max);
    assert!(worst < 4e-3, "worst relative key difference {worst}");
    assert_eq!(
        &shifted.cache.values(0)[..n * kv],
        &fresh.cache.values(0)[..n * kv]
    );
    // The kept prefix is untouched.
    assert_eq!(&ka[..keep * kv], &kb[..keep * kv]);
}

fn run_tokens(extra: &[&str]) -> usize {
    let m = model_path(SMOLLM).unwrap();
    let mut args = vec![
        "-m",
        m.to_str().unwrap(),
        "-p",
        "Once upon a time",
        "-c",
        "64",
        "-n",
        "150",
        "--temp",
        "0",
        "--verbose",
    ];
    args.extend_from_slice(extra);
    let out = llamafile(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    common::generated_tokens(&stderr)
}

#[test]
fn generation_goes_past_a_full_context_only_when_asked() {
    if model_path(SMOLLM).is_none() {
        return;
    }
    let without = run_tokens(&[]);
    assert!(without < 64, "{without}");
    assert_eq!(run_tokens(&["--context-shift", "--keep", "-1"]), 150);
    assert_eq!(run_tokens(&["--context-shift", "--keep", "2"]), 150);
    assert!(run_tokens(&["--context-shift", "--no-context-shift"]) < 64);
}
