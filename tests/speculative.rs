//! Speculative decoding changes speed, never output: with every draft source (n-gram lookup,
//! a draft model, the target's own first layers) generation gives the same tokens as plain
//! decoding, greedy or seeded sampling alike, because verification samples the target at every
//! position in order and batched logits equal one-at-a-time logits bit for bit. Bad flags and a
//! draft model with another vocabulary are one-line errors.

mod common;

use common::{assert_one_line_error, llamafile, model_path};
use llamafile::cli;
use llamafile::engine::session::Session;
use llamafile::engine::speculative::setup::{self, SpecOptions};
use llamafile::engine::speculative::SpecStats;
use llamafile::engine::{load_model, Loaded};
use llamafile::sampling::{Sampler, SamplingParams, TokenVocab};
use std::sync::Arc;

const TARGET: &str = "qwen2.5-coder-1.5b-instruct";
const DRAFT: &str = "qwen2.5-coder-0.5b-instruct";
const PROMPT: &str = "<|im_start|>user\nWrite a Python function that returns the squares of a list, then the same function again with a docstring.<|im_end|>\n<|im_start|>assistant\n";
const N: i64 = 64;

fn load(stem: &str) -> Option<Loaded> {
    let p = model_path(stem)?;
    Some(load_model(p.to_str().unwrap(), None).expect("model loads"))
}

fn spec_args(flags: &[&str]) -> SpecOptions {
    let mut argv = vec!["llamafile"];
    argv.extend_from_slice(flags);
    cli::parse(argv.into_iter().map(Into::into).collect())
        .expect("flags parse")
        .spec
        .options()
}

fn sampler(m: &Loaded, temperature: f32) -> Sampler {
    Sampler::new(
        SamplingParams {
            temperature,
            seed: 1234,
            ..Default::default()
        },
        Arc::new(TokenVocab::new(&m.tokenizer)),
    )
}

/// The generated tokens, and the speculation counters when `spec` flags were given.
fn generate(
    m: &Loaded,
    draft: Option<&Loaded>,
    flags: Option<&[&str]>,
    temperature: f32,
) -> (Vec<u32>, SpecStats) {
    let prompt = m.tokenizer.encode(PROMPT, true, true);
    let mut s = Session::new(&m.model, 1024, 512);
    let logits = s.feed(&prompt, false).unwrap();
    let mut smp = sampler(m, temperature);
    let mut out = Vec::new();
    let is_eog = |id| m.tokenizer.is_eog(id);
    let on_token = |ev: &llamafile::engine::session::TokenEvent| {
        out.push(ev.id);
        true
    };
    let Some(flags) = flags else {
        s.generate(logits, &mut smp, N, is_eog, on_token).unwrap();
        return (out, SpecStats::default());
    };
    let args = spec_args(flags);
    let mut spec = setup::build(&args, m, draft, 1024, 512)
        .expect("speculator")
        .expect("speculation asked for");
    s.generate_with_drafts(logits, &mut smp, N, is_eog, on_token, Some(&mut spec))
        .unwrap();
    (out, spec.stats)
}

#[test]
fn every_draft_source_leaves_greedy_output_unchanged() {
    let (Some(target), Some(draft)) = (load(TARGET), load(DRAFT)) else {
        return;
    };
    let (plain, _) = generate(&target, None, None, 0.0);
    assert_eq!(
        plain.len(),
        N as usize,
        "the plain run should use its whole budget"
    );
    for flags in [
        &["--model-draft", "x"][..],
        &[
            "--spec-type",
            "ngram-simple",
            "--spec-ngram-simple-size-n",
            "3",
        ],
        &["--n-layer-exit-draft", "20"],
        &[
            "--model-draft",
            "x",
            "--spec-type",
            "ngram-simple",
            "--draft-max",
            "4",
        ],
    ] {
        let (got, stats) = generate(&target, Some(&draft), Some(flags), 0.0);
        assert_eq!(got, plain, "{flags:?}");
        eprintln!("{flags:?}: {stats:?}");
        assert!(stats.accepted <= stats.drafted);
    }
    // A same-family draft model agrees with the target most of the time.
    let (_, stats) = generate(&target, Some(&draft), Some(&["--model-draft", "x"]), 0.0);
    assert!(
        stats.accepted * 2 >= stats.drafted && stats.accepted > N as usize / 4,
        "{stats:?}"
    );
}

#[test]
fn seeded_sampling_is_unchanged_too() {
    let (Some(target), Some(draft)) = (load(TARGET), load(DRAFT)) else {
        return;
    };
    let (plain, _) = generate(&target, None, None, 0.8);
    let (spec, stats) = generate(&target, Some(&draft), Some(&["--model-draft", "x"]), 0.8);
    assert_eq!(spec, plain, "{stats:?}");
    assert!(stats.accepted > 0, "{stats:?}");
}

#[test]
fn cli_speculation_and_its_errors() {
    let (Some(t), Some(d), Some(smol)) = (
        model_path(TARGET),
        model_path(DRAFT),
        model_path("SmolLM2-135M-Instruct.Q4_1"),
    ) else {
        return;
    };
    let (t, d, smol) = (
        t.to_str().unwrap(),
        d.to_str().unwrap(),
        smol.to_str().unwrap(),
    );
    let base = ["-m", t, "-p", "def fib(n):", "-n", "24", "--temp", "0"];
    let plain = llamafile(&base);
    assert!(plain.status.success());
    let mut with_draft = base.to_vec();
    with_draft.extend(["-md", d, "--verbose"]);
    let spec = llamafile(&with_draft);
    let stderr = String::from_utf8_lossy(&spec.stderr);
    assert!(spec.status.success(), "{stderr}");
    assert_eq!(spec.stdout, plain.stdout);
    assert!(stderr.contains("speculative: "), "{stderr}");

    let mut bad = base.to_vec();
    bad.extend(["-md", smol]);
    assert_one_line_error(&llamafile(&bad), "draft model does not fit the target");
    let mut bad = base.to_vec();
    bad.extend(["--spec-type", "bogus"]);
    assert_one_line_error(&llamafile(&bad), "--spec-type: unknown type \"bogus\"");
    let mut bad = base.to_vec();
    bad.extend(["--n-layer-exit-draft", "99"]);
    assert_one_line_error(&llamafile(&bad), "--n-layer-exit-draft 99");
    let mut bad = base.to_vec();
    bad.extend(["-md", "/nonexistent/draft.gguf"]);
    assert_one_line_error(&llamafile(&bad), "cannot load the draft model");
}
