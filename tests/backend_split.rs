//! The backend seam changes nothing: a model whose blocks run on two (or three) CPU backends,
//! each with its own cache part of its layers and the hidden rows crossing between them, gives
//! logits bit-identical to the same model on one backend, for single tokens, a batch, several
//! sequences in one batch, a context shift, truncation and prefix reuse, an early-exit draft
//! cut on either side of the split, and the hidden states behind embeddings. The CLI's
//! `LLAMAFILE_SPLIT_LAYERS` debug split prints the same greedy text as no split.

mod common;

use common::{llamafile, model_path};
use llamafile::backend::{Placement, SeqCache};
use llamafile::engine::session::{shift_context, Session};
use llamafile::engine::PlacedModel;
use llamafile::engine::{load_model, Loaded};
use llamafile::model::Batch;
use std::process::Command;

/// The model `stem` on one CPU backend and again split at `cuts`.
fn pair(stem: &str, cuts: &[usize]) -> Option<(Loaded, Loaded)> {
    let p = model_path(stem)?;
    let load = || load_model(p.to_str().unwrap(), None).expect("model loads");
    let (mut one, mut split) = (load(), load());
    let n = one.model.config.n_layer;
    one.model.set_placement(Placement::cpu(n)).unwrap();
    split
        .model
        .set_placement(Placement::cpu_split(n, cuts).unwrap())
        .unwrap();
    assert_eq!(split.model.placement().stages().len(), cuts.len() + 1);
    Some((one, split))
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn assert_same(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    assert!(bits(a) == bits(b), "{what}: logits differ across the split");
}

/// Every layer's keys and values of the first `n` positions, bit for bit.
fn assert_same_cache(what: &str, model: &PlacedModel, a: &SeqCache, b: &SeqCache, n: usize) {
    let kv = model.config.kv_dim();
    assert_eq!(a.len(), b.len(), "{what}: cache lengths");
    for layer in a.layers() {
        assert!(
            a.keys(layer)[..n * kv] == b.keys(layer)[..n * kv]
                && a.values(layer)[..n * kv] == b.values(layer)[..n * kv],
            "{what}: layer {layer}'s cache differs across the split"
        );
    }
}

fn tokens(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| 100 + (seed + 37 * i) % 5000)
        .collect()
}

/// Every case, comparing the model on one backend (`a`) with the split one (`b`).
fn check(stem: &str, cuts: &[usize]) {
    let Some((a, b)) = pair(stem, cuts) else {
        return;
    };
    let (ma, mb) = (&a.model, &b.model);
    let prompt = tokens(80, 1);

    // One token at a time (the single-position attention path).
    let (mut sa, mut sb) = (Session::new(ma, 256, 1), Session::new(mb, 256, 1));
    for (i, &t) in prompt[..12].iter().enumerate() {
        assert_same(
            &format!("{stem}: token {i}"),
            &sa.feed(&[t], false).unwrap(),
            &sb.feed(&[t], false).unwrap(),
        );
    }
    assert_same_cache(&format!("{stem}: single"), ma, &sa.cache, &sb.cache, 12);

    // One batch with every position's logits (the tiled path for runs of 64+ tokens).
    let (mut sa, mut sb) = (Session::new(ma, 256, 512), Session::new(mb, 256, 512));
    let (la, lb) = (
        sa.feed(&prompt, true).unwrap(),
        sb.feed(&prompt, true).unwrap(),
    );
    assert_same(&format!("{stem}: batch"), &la, &lb);
    assert_same_cache(
        &format!("{stem}: batch"),
        ma,
        &sa.cache,
        &sb.cache,
        prompt.len(),
    );

    // Truncation and prefix reuse: keep 30, feed another continuation.
    let other = tokens(20, 7);
    let mut next = prompt[..30].to_vec();
    next.extend_from_slice(&other);
    assert_eq!(sa.keep_prefix(&next, next.len()), 30);
    assert_eq!(sb.keep_prefix(&next, next.len()), 30);
    let (la, lb) = (
        sa.feed(&other, true).unwrap(),
        sb.feed(&other, true).unwrap(),
    );
    assert_same(&format!("{stem}: after truncation"), &la, &lb);

    // Several sequences in one batch: a decode step of sequence 0 beside 70 prompt tokens of
    // sequence 1, then both decoding.
    let run = |m: &PlacedModel| -> Vec<f32> {
        let mut caches = vec![m.new_cache(256), m.new_cache(256)];
        let mut out = m.forward(&Batch::sequence(&prompt[..10], 0, true), &mut caches[..1]);
        let mut batch = Batch {
            tokens: vec![prompt[10]],
            pos: vec![10],
            seq: vec![0],
            logits: vec![true],
            bidirectional: false,
            rope_pos: Vec::new(),
        };
        for (i, &t) in other.iter().cycle().take(70).enumerate() {
            batch.tokens.push(t);
            batch.pos.push(i);
            batch.seq.push(1);
            batch.logits.push(i % 9 == 0);
        }
        out.extend(m.forward(&batch, &mut caches));
        let both = Batch {
            tokens: vec![prompt[11], other[0]],
            pos: vec![11, 70],
            seq: vec![0, 1],
            logits: vec![true, true],
            bidirectional: false,
            rope_pos: Vec::new(),
        };
        out.extend(m.forward(&both, &mut caches));
        out
    };
    assert_same(&format!("{stem}: two sequences"), &run(ma), &run(mb));

    // Context shift: keep 4, drop half of the rest, go on feeding.
    fn shifted<'m>(m: &'m PlacedModel, prompt: &[u32], other: &[u32]) -> (Vec<f32>, Session<'m>) {
        let mut s = Session::new(m, 96, 512);
        s.feed(prompt, false).unwrap();
        assert!(shift_context(m, &mut s.cache, &mut s.tokens, 4).unwrap());
        let logits = s.feed(other, true).unwrap();
        (logits, s)
    }
    let ((la, sa), (lb, sb)) = (shifted(ma, &prompt, &other), shifted(mb, &prompt, &other));
    assert_same(&format!("{stem}: after a context shift"), &la, &lb);
    assert_same_cache(
        &format!("{stem}: shift"),
        ma,
        &sa.cache,
        &sb.cache,
        sa.tokens.len(),
    );

    // Early-exit drafts: fewer layers than the first backend has, and more.
    for n_layers in [cuts[0] - 1, cuts[0] + 2] {
        let (mut da, mut db) = (
            Session::with_layers(ma, 128, 512, n_layers),
            Session::with_layers(mb, 128, 512, n_layers),
        );
        let (la, lb) = (
            da.feed(&prompt, true).unwrap(),
            db.feed(&prompt, true).unwrap(),
        );
        assert_same(&format!("{stem}: early exit at {n_layers}"), &la, &lb);
        assert_eq!(db.cache.layers(), 0..n_layers);
    }

    // Hidden states (embeddings).
    let hidden = |m: &PlacedModel| {
        m.hidden_states(&Batch::sequence(&prompt, 0, true), &mut [m.new_cache(128)])
    };
    assert_same(&format!("{stem}: hidden states"), &hidden(ma), &hidden(mb));
}

#[test]
fn smollm2_split_in_two_equals_one_backend() {
    check("SmolLM2-135M-Instruct.Q4_1", &[13]);
}

#[test]
fn smollm2_split_in_three_equals_one_backend() {
    check("SmolLM2-135M-Instruct.Q4_1", &[4, 25]);
}

/// Gemma 3: sliding-window layers with their own RoPE base, pre- and post-norms, QK-norm.
#[test]
fn gemma3_split_equals_one_backend() {
    check("gemma-3-270m-q4_k_m", &[7]);
}

/// Qwen2.5: attention biases.
#[test]
fn qwen25_split_equals_one_backend() {
    check("qwen2.5-coder-0.5b-instruct", &[12]);
}

fn greedy(split: Option<&str>, extra: &[&str]) -> String {
    let m = model_path("SmolLM2-135M-Instruct.Q4_1").unwrap();
    let mut args = vec![
        "-m",
        m.to_str().unwrap(),
        "-p",
        "The three primary colours are",
        "-n",
        "40",
        "--temp",
        "0",
    ];
    args.extend_from_slice(extra);
    let out = match split {
        Some(k) => Command::new(env!("CARGO_BIN_EXE_llamafile"))
            .args(&args)
            .env("LLAMAFILE_SPLIT_LAYERS", k)
            .output()
            .unwrap(),
        None => llamafile(&args),
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_cli_prints_the_same_text_split_or_not() {
    if model_path("SmolLM2-135M-Instruct.Q4_1").is_none() {
        return;
    }
    let plain = greedy(None, &[]);
    assert!(plain.len() > 40, "{plain:?}");
    assert_eq!(greedy(Some("10"), &[]), plain);
    // A small context that shifts, and the early-exit draft, across the split.
    let shift = ["-c", "32", "--context-shift", "--keep", "2"];
    assert_eq!(greedy(Some("10,20"), &shift), greedy(None, &shift));
    let draft = ["--spec-type", "early-exit", "--n-layer-exit-draft", "12"];
    assert_eq!(greedy(Some("10"), &draft), greedy(None, &draft));
}

#[test]
fn a_bad_split_is_one_line_naming_the_variable() {
    let Some(m) = model_path("SmolLM2-135M-Instruct.Q4_1") else {
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_llamafile"))
        .args(["-m", m.to_str().unwrap(), "-p", "hi", "-n", "1"])
        .env("LLAMAFILE_SPLIT_LAYERS", "ten")
        .output()
        .unwrap();
    assert!(!out.status.success());
    common::assert_one_line_error(&out, "LLAMAFILE_SPLIT_LAYERS=\"ten\"");
}
