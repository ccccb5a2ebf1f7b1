//! The MoE self-speculative draft (`--spec-type moe-draft --moe-draft-experts N`) changes speed,
//! never output: on the synthetic Qwen2-MoE (shared expert, 8 experts, k = 2), Mixtral-style
//! (no shared expert, 4 experts, k = 2), DeepSeek-V2-style (latent attention, a leading dense
//! layer, 2 ungated shared experts, 8 experts, k = 2) and DeepSeek-V3-style (sigmoid gating with
//! a selection bias and expert groups, 16 experts, k = 3) models, greedy and seeded generation
//! give the same tokens with the draft as without, for every N; `--verbose` reports acceptance; and drafts the model
//! cannot make (N = 0 without shared experts, N above the expert count, a dense model) are
//! one-line errors.

mod common;

use common::synth::synth_model_of;
use common::{assert_one_line_error, llamafile, model_path};
use llamafile::cli;
use llamafile::engine::session::Session;
use llamafile::engine::speculative::{setup, SpecStats};
use llamafile::engine::{load_model, Loaded};
use llamafile::sampling::{Sampler, SamplingParams, TokenVocab};
use std::sync::Arc;

const N: i64 = 40;

fn load(family: &str) -> Option<Loaded> {
    let p = synth_model_of(family, "q8_0")?;
    Some(load_model(p.to_str().unwrap(), None).expect("model loads"))
}

/// The generated tokens, and the speculation counters when `flags` were given.
fn generate(m: &Loaded, flags: Option<&[&str]>, temperature: f32) -> (Vec<u32>, SpecStats) {
    let prompt = m.tokenizer.encode("Once upon a time, in a", true, true);
    let mut s = Session::new(&m.model, 512, 512);
    let logits = s.feed(&prompt, false).unwrap();
    let mut smp = Sampler::new(
        SamplingParams {
            temperature,
            seed: 42,
            ..Default::default()
        },
        Arc::new(TokenVocab::new(&m.tokenizer)),
    );
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
    let mut argv = vec!["llamafile"];
    argv.extend_from_slice(flags);
    let args = cli::parse(argv.into_iter().map(Into::into).collect())
        .expect("flags parse")
        .spec
        .options();
    let mut spec = setup::build(&args, m, None, 512, 512)
        .expect("speculator")
        .expect("speculation asked for");
    s.generate_with_drafts(logits, &mut smp, N, is_eog, on_token, Some(&mut spec))
        .unwrap();
    (out, spec.stats)
}

#[test]
fn moe_draft_leaves_greedy_and_seeded_output_unchanged() {
    let (Some(qwen2moe), Some(mixtral)) = (load("qwen2moe"), load("mixtral")) else {
        return;
    };
    check_drafts(&[(&qwen2moe, &["0", "1", "2"]), (&mixtral, &["1", "2"])]);
}

#[test]
fn moe_draft_of_deepseek_models_leaves_output_unchanged() {
    let (Some(v2), Some(v3)) = (load("deepseek2"), load("deepseek3")) else {
        return;
    };
    check_drafts(&[(&v2, &["0", "1", "2"]), (&v3, &["0", "1", "3"])]);
}

/// Greedy and seeded output of each model with the MoE draft of each N equals its plain output;
/// greedy drafts are all accepted exactly when N is the model's own k.
fn check_drafts(models: &[(&Loaded, &[&str])]) {
    for &(m, experts) in models {
        let k = m
            .model
            .config
            .moe
            .as_ref()
            .unwrap()
            .n_expert_used
            .to_string();
        for temperature in [0.0, 0.8] {
            let (plain, _) = generate(m, None, temperature);
            assert_eq!(
                plain.len(),
                N as usize,
                "the plain run uses its whole budget"
            );
            for n in experts {
                let flags = [
                    "--spec-type",
                    "moe-draft",
                    "--moe-draft-experts",
                    n,
                    "--draft-p-min",
                    "0",
                    "--draft-max",
                    "4",
                ];
                let (got, stats) = generate(m, Some(&flags), temperature);
                eprintln!(
                    "{} N={n} temp {temperature}: {stats:?}",
                    m.model.config.arch.name()
                );
                assert_eq!(got, plain, "N={n} temp {temperature}: {stats:?}");
                assert!(
                    stats.drafted > 0 && stats.accepted <= stats.drafted,
                    "{stats:?}"
                );
                if temperature == 0.0 {
                    // N = k: the draft is the target itself, so greedy drafts are all accepted;
                    // with fewer experts it is another function, wrong somewhere in 40 tokens.
                    let all = stats.accepted == stats.drafted;
                    assert_eq!(all, *n == k, "N={n}: {stats:?}");
                }
            }
        }
    }
}

#[test]
fn cli_moe_draft_and_its_errors() {
    let (Some(qwen2moe), Some(mixtral), Some(smol)) = (
        synth_model_of("qwen2moe", "q8_0"),
        synth_model_of("mixtral", "q8_0"),
        model_path("SmolLM2-135M-Instruct.Q4_1"),
    ) else {
        return;
    };
    let (q, m, smol) = (
        qwen2moe.to_str().unwrap(),
        mixtral.to_str().unwrap(),
        smol.to_str().unwrap(),
    );
    let base = |model| {
        vec![
            "-m",
            model,
            "-p",
            "Once upon a time",
            "-n",
            "24",
            "--temp",
            "0",
        ]
    };
    let plain = llamafile(&base(q));
    assert!(plain.status.success());
    let mut spec = base(q);
    spec.extend([
        "--moe-draft-experts",
        "0",
        "--draft-p-min",
        "0",
        "--verbose",
    ]);
    let out = llamafile(&spec);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(out.stdout, plain.stdout);
    assert!(stderr.contains("speculative: "), "{stderr}");

    let mut bad = base(m);
    bad.extend(["--moe-draft-experts", "0"]);
    assert_one_line_error(&llamafile(&bad), "no shared experts");
    let mut bad = base(q);
    bad.extend(["--moe-draft-experts", "9"]);
    assert_one_line_error(&llamafile(&bad), "--moe-draft-experts 9");
    let mut bad = base(smol);
    bad.extend(["--spec-type", "moe-draft"]);
    assert_one_line_error(&llamafile(&bad), "has no experts");
}
