//! LoRA adapters (`--lora`, `--lora-scaled`, `--lora-init-without-apply`, `/lora-adapters`, a
//! request's `lora`), on the synthetic llama3 model and adapters of `tools/synth-model.py`.
//!
//! The logits are compared with llama.cpp's in `tests/data/lora/` (made by
//! `tools/make-lora-refs.sh`: adapter `all` at scales 1 and 0.5, and `all` at 1 with `some` at
//! 0.5) as `tests/families.rs` compares the families: the mean |dlogit| over the stored ids
//! within twice llama.cpp's own batched-vs-single-token noise, the argmax about as often the
//! same as llama.cpp agrees with itself. Bad adapter files and flags are one-line errors (on
//! SmolLM2); the server's endpoints answer in llama-server's shapes.

mod common;

use common::http::{post, send, Reply};
use common::logit_refs::{read_rows, Agreement};
use common::server::{start_with, Server};
use common::synth::synth_model;
use common::{assert_one_line_error, llamafile, model_path};
use llamafile::engine::PlacedModel;
use llamafile::gguf::{GgufFile, GgufWriter};
use llamafile::model::{Batch, ForwardPlan, LoraMix};
use llamafile::quant::GgmlType;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

fn lora_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/lora")
}

fn index() -> Value {
    let text = std::fs::read_to_string(lora_dir().join("index.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn synth_dir() -> PathBuf {
    match std::env::var("LLAMAFILE_SYNTH") {
        Ok(d) => PathBuf::from(d),
        Err(_) => PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
            .join(".cache/llamafile-rs/synth"),
    }
}

/// The synthetic llama3 model and its adapters `all` and `some`, generated if absent and
/// checked against the SHA-256 the references were made from; `None`: skipped.
fn synth_files() -> Option<(PathBuf, PathBuf, PathBuf)> {
    let idx = index();
    let model = synth_model("llama3", "f16", idx["model_sha256"].as_str().unwrap())?;
    let adapter = |name: &str| -> Option<PathBuf> {
        let path = synth_dir().join(format!("lora-{name}-llama3.gguf"));
        if !path.exists() {
            // The adapter writer reads the vocabulary size from SmolLM2, as the models do.
            model_path("SmolLM2-135M-Instruct.Q4_1")?;
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/synth-model.py");
            let out = Command::new("python3")
                .arg(script)
                .args(["--lora", name, "llama3", "f16"])
                .arg(&path)
                .output()
                .expect("python3 runs");
            assert!(
                out.status.success(),
                "tools/synth-model.py --lora {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let bytes = std::fs::read(&path).unwrap();
        let got = sha256_hex(&bytes);
        assert_eq!(
            got,
            idx["adapters"][name].as_str().unwrap(),
            "{} differs from the adapter the references were made from; delete it to \
             regenerate, or rerun tools/make-lora-refs.sh",
            path.display()
        );
        Some(path)
    };
    Some((model, adapter("all")?, adapter("some")?))
}

fn sha256_hex(bytes: &[u8]) -> String {
    let out = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(bytes)?;
            c.wait_with_output()
        })
        .expect("sha256sum runs");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

fn prompt_ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as u32)
        .collect()
}

fn logits(model: &PlacedModel, ids: &[u32], n_ctx: usize, mix: Option<&LoraMix>) -> Vec<f32> {
    let mut cache = [model.new_cache(n_ctx)];
    let batch = Batch::sequence(ids, 0, true);
    match mix {
        Some(mix) => model
            .try_forward_mix(&batch, &mut cache, ForwardPlan::full(&model.config), mix)
            .unwrap(),
        None => model.forward(&batch, &mut cache),
    }
}

#[test]
fn adapters_match_llama_cpp_at_each_scale_and_two_at_once() {
    let Some((model_file, all, some)) = synth_files() else {
        return;
    };
    let idx = index();
    let k = idx["top_k"].as_u64().unwrap() as usize;
    let n_ctx = idx["n_ctx"].as_u64().unwrap() as usize;
    let sample: Vec<usize> = idx["sample_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let file = Arc::new(GgufFile::open(&model_file).unwrap());
    let mut model = PlacedModel::load(file).unwrap();
    let n_vocab = model.config.n_vocab;
    let plain: Vec<Vec<f32>> = idx["sets"][0]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| logits(&model, &prompt_ids(p), n_ctx, None))
        .collect();
    model.add_lora(&all, 0.0).unwrap();
    model.add_lora(&some, 0.0).unwrap();
    for set in idx["sets"].as_array().unwrap() {
        let name = set["name"].as_str().unwrap();
        let mut mix = LoraMix::uniform(2, 0.0);
        for a in set["adapters"].as_array().unwrap() {
            let id = ["all", "some"]
                .iter()
                .position(|n| a[0] == *n)
                .expect("adapter name");
            mix.scales[id] = a[1].as_f64().unwrap() as f32;
        }
        let rows = read_rows(&lora_dir(), name, k, sample.len());
        let mut verdict = Agreement::default();
        for (p, prompt) in set["prompts"].as_array().unwrap().iter().enumerate() {
            let ids = prompt_ids(prompt);
            let got = logits(&model, &ids, n_ctx, Some(&mix));
            for row in got.chunks_exact(n_vocab) {
                verdict.add(row, &rows[verdict.rows()], &sample);
            }
            // The adapters move the logits far beyond the tolerance (else this proves little).
            let moved = got
                .iter()
                .zip(&plain[p])
                .map(|(a, b)| (a - b).abs() as f64)
                .sum::<f64>()
                / got.len() as f64;
            assert!(
                moved > 0.05,
                "{name}: the adapters moved logits by {moved} only"
            );
        }
        assert_eq!(verdict.rows(), rows.len(), "{name}: positions");
        verdict.assert_within_noise(name, set);
    }
    // Scales of 0 are the model itself, bit for bit; the model's own scales (`--lora-scaled`)
    // are what a pass naming none runs at.
    let ids = prompt_ids(&idx["sets"][0]["prompts"][1]);
    let off = logits(&model, &ids, n_ctx, Some(&LoraMix::uniform(2, 0.0)));
    assert!(off == plain[1], "adapters at scale 0 changed the logits");
    let file = Arc::new(GgufFile::open(&model_file).unwrap());
    let mut scaled = PlacedModel::load(file).unwrap();
    scaled.add_lora(&all, 0.5).unwrap();
    scaled.add_lora(&some, 0.0).unwrap();
    let own = logits(&scaled, &ids, n_ctx, None);
    let mix = LoraMix {
        scales: vec![0.5, 0.0],
    };
    assert!(own == logits(&model, &ids, n_ctx, Some(&mix)));
}

/// A scratch directory of this test process.
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("llamafile-lora-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// An adapter for SmolLM2 (n_embd 576, attention q 576 rows), altered by `edit`.
fn write_adapter(path: &Path, edit: impl FnOnce(&mut GgufWriter)) {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "llama");
    w.add_kv("general.type", "adapter");
    w.add_kv("adapter.type", "lora");
    w.add_kv("adapter.lora.alpha", 8.0f32);
    edit(&mut w);
    w.write_file(path).unwrap();
}

fn f32_tensor(w: &mut GgufWriter, name: &str, dims: &[u64]) {
    let n: u64 = dims.iter().product();
    let bytes: Vec<u8> = (0..n)
        .flat_map(|i| (i as f32 * 1e-4).to_le_bytes())
        .collect();
    w.add_tensor(name, dims, GgmlType::F32, bytes).unwrap();
}

#[test]
fn bad_adapters_and_flags_are_one_line_errors() {
    let Some(model) = model_path("SmolLM2-135M-Instruct.Q4_1") else {
        return;
    };
    let m = model.to_str().unwrap();
    let dir = scratch("bad");
    let pair = |w: &mut GgufWriter| {
        f32_tensor(w, "blk.0.attn_q.weight.lora_a", &[576, 4]);
        f32_tensor(w, "blk.0.attn_q.weight.lora_b", &[4, 576]);
    };
    type Edit<'a> = Box<dyn FnOnce(&mut GgufWriter) + 'a>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "not-adapter",
            Box::new(|w: &mut GgufWriter| {
                w.add_kv("general.type", "model");
            }),
            "general.type is \"model\", expected \"adapter\"",
        ),
        (
            "wrong-arch",
            Box::new(|w: &mut GgufWriter| {
                w.add_kv("general.architecture", "qwen2");
            }),
            "architecture \"qwen2\" does not match the model's \"llama\"",
        ),
        (
            "wrong-shape",
            Box::new(|w: &mut GgufWriter| {
                f32_tensor(w, "blk.0.attn_q.weight.lora_a", &[576, 4]);
                f32_tensor(w, "blk.0.attn_q.weight.lora_b", &[4, 100]);
            }),
            "tensor 'blk.0.attn_q.weight.lora_b' has shape [4, 100], expected [4, 576]",
        ),
        (
            "half",
            Box::new(|w: &mut GgufWriter| {
                f32_tensor(w, "blk.0.attn_q.weight.lora_a", &[576, 4]);
            }),
            "pair for 'blk.0.attn_q.weight' is missing its lora_b",
        ),
        (
            "no-such-weight",
            Box::new(|w: &mut GgufWriter| {
                f32_tensor(w, "blk.99.attn_q.weight.lora_a", &[576, 4]);
                f32_tensor(w, "blk.99.attn_q.weight.lora_b", &[4, 576]);
            }),
            "'blk.99.attn_q.weight' does not exist in the model",
        ),
        (
            "odd-suffix",
            Box::new(|w: &mut GgufWriter| {
                pair(w);
                f32_tensor(w, "blk.0.attn_q.weight.extra", &[4]);
            }),
            "unexpected suffix",
        ),
        (
            "not-adaptable",
            Box::new(|w: &mut GgufWriter| {
                f32_tensor(w, "token_embd.weight.lora_a", &[576, 4]);
                f32_tensor(w, "token_embd.weight.lora_b", &[4, 49152]);
            }),
            "'token_embd.weight' cannot be adapted here",
        ),
    ];
    for (name, edit, needle) in cases {
        let path = dir.join(format!("{name}.gguf"));
        write_adapter(&path, edit);
        let p = path.to_str().unwrap();
        let out = llamafile(&["-m", m, "--lora", p, "-p", "hi", "-n", "1"]);
        assert_one_line_error(&out, needle);
        assert_one_line_error(&out, p);
    }
    let junk = dir.join("junk.gguf");
    std::fs::write(&junk, b"not a gguf at all").unwrap();
    let out = llamafile(&["-m", m, "--lora", junk.to_str().unwrap(), "-p", "hi"]);
    assert_one_line_error(&out, "not a GGUF");
    let out = llamafile(&["-m", m, "--lora", "/nonexistent/a.gguf", "-p", "hi"]);
    assert_one_line_error(&out, "/nonexistent/a.gguf");
    let out = llamafile(&["-m", m, "--lora-scaled", "a.gguf", "-p", "hi"]);
    assert_one_line_error(&out, "each item must be FNAME:SCALE");
    let out = llamafile(&["-m", m, "--lora-scaled", "a.gguf:big", "-p", "hi"]);
    assert_one_line_error(&out, "the scale of a.gguf is not a number");
    // A good adapter loads (and runs).
    let good = dir.join("good.gguf");
    write_adapter(&good, pair);
    let out = llamafile(&[
        "-m",
        m,
        "--lora",
        good.to_str().unwrap(),
        "-p",
        "hi",
        "-n",
        "2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Greedy text of the CLI on the synthetic model with `flags`.
fn cli_text(model: &Path, flags: &[&str]) -> String {
    let mut args = vec![
        "-m",
        model.to_str().unwrap(),
        "-p",
        "Once upon a time",
        "-n",
        "12",
        "--temp",
        "0",
        "--ignore-eos",
    ];
    args.extend_from_slice(flags);
    let out = llamafile(&args);
    assert!(
        out.status.success(),
        "{flags:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn cli_flags_load_scale_and_hold_adapters() {
    let Some((model, all, some)) = synth_files() else {
        return;
    };
    let (a, s) = (all.to_str().unwrap(), some.to_str().unwrap());
    let plain = cli_text(&model, &[]);
    let full = cli_text(&model, &["--lora", a]);
    assert_ne!(plain, full, "the adapter changed nothing");
    assert_eq!(
        full,
        cli_text(&model, &["--lora-scaled", &format!("{a}:1")])
    );
    assert_eq!(
        plain,
        cli_text(&model, &["--lora-scaled", &format!("{a}:0")])
    );
    assert_eq!(
        plain,
        cli_text(&model, &["--lora", a, "--lora-init-without-apply"])
    );
    // Comma-separated values, and the two flags mixed, in order.
    let two = cli_text(&model, &["--lora", &format!("{a},{s}")]);
    assert_ne!(two, full);
    assert_eq!(
        two,
        cli_text(&model, &["--lora", a, "--lora-scaled", &format!("{s}:1")])
    );
}

fn get(server: &Server, path: &str) -> Reply {
    send("127.0.0.1", server.port, "GET", path, &[], "")
}

fn complete(server: &Server, lora: Option<Value>) -> String {
    let mut body = json!({
        "prompt": "Once upon a time",
        "n_predict": 10,
        "temperature": 0,
        "ignore_eos": true,
        "cache_prompt": true,
    });
    if let Some(l) = lora {
        body["lora"] = l;
    }
    let r = post(server.port, "/completion", &body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    r.json()["content"].as_str().unwrap().to_string()
}

#[test]
fn server_lists_sets_and_applies_adapters_per_request() {
    let Some((model, all, some)) = synth_files() else {
        return;
    };
    let (a, s) = (all.to_str().unwrap(), some.to_str().unwrap());
    let scaled = format!("{s}:0.5");
    let server = start_with(
        &model,
        &[
            "-c",
            "512",
            "-np",
            "2",
            "--lora",
            a,
            "--lora-scaled",
            &scaled,
        ],
    );
    let list = get(&server, "/lora-adapters");
    assert_eq!(list.status, 200);
    assert_eq!(
        list.json(),
        json!([
            {"id": 0, "path": a, "scale": 1.0, "task_name": "", "prompt_prefix": ""},
            {"id": 1, "path": s, "scale": 0.5, "task_name": "", "prompt_prefix": ""},
        ])
    );
    let both = complete(&server, None);
    let none = complete(&server, Some(json!([])));
    let only_all = complete(&server, Some(json!([{"id": 0, "scale": 1.0}])));
    assert_ne!(both, none);
    assert_ne!(both, only_all);
    // The request's scales, then the global ones, give the same text.
    assert_eq!(
        both,
        complete(
            &server,
            Some(json!([{"id": 1, "scale": 0.5}, {"id": 0, "scale": 1}]))
        )
    );
    let r = post(
        server.port,
        "/lora-adapters",
        &json!([{"id": 0, "scale": 1.0}]),
    );
    assert_eq!((r.status, r.json()), (200, json!({"success": true})));
    assert_eq!(get(&server, "/lora-adapters").json()[1]["scale"], 0.0);
    assert_eq!(complete(&server, None), only_all);
    let r = post(server.port, "/lora-adapters", &json!([]));
    assert_eq!(r.status, 200);
    assert_eq!(complete(&server, None), none);

    // Requests at different scales at the same time: never in one pass, each as if alone.
    let port = server.port;
    let runs: Vec<_> = [
        json!([]),
        json!([{"id": 0, "scale": 1}]),
        json!([]),
        json!([{"id": 0, "scale": 1}]),
    ]
    .into_iter()
    .map(|l| {
        std::thread::spawn(move || {
            let body = json!({"prompt": "Once upon a time", "n_predict": 10,
                    "temperature": 0, "ignore_eos": true, "lora": l});
            post(port, "/completion", &body).json()["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
    })
    .collect();
    let texts: Vec<String> = runs.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(
        texts,
        [
            none.clone(),
            only_all.clone(),
            none.clone(),
            only_all.clone()
        ]
    );

    // Bad requests: 400 naming the field.
    for (body, path, needle) in [
        (
            json!({"id": 0}),
            "/lora-adapters",
            "Request body must be an array",
        ),
        (
            json!([{"id": 2, "scale": 1}]),
            "/lora-adapters",
            "[0].id: no LoRA adapter 2",
        ),
        (json!([{"scale": 1}]), "/lora-adapters", "[0].id: missing"),
        (
            json!([{"id": 0, "scale": "x"}]),
            "/lora-adapters",
            "[0].scale",
        ),
        (
            json!({"prompt": "a", "lora": {"id": 0}}),
            "/completion",
            "lora: expected an array",
        ),
        (
            json!({"prompt": "a", "lora": [{"id": 7, "scale": 1}]}),
            "/completion",
            "lora[0].id: no LoRA adapter 7",
        ),
        (
            json!({"messages": [{"role": "user", "content": "a"}], "lora": [3]}),
            "/v1/chat/completions",
            "lora[0]: expected an object",
        ),
    ] {
        let r = post(port, path, &body);
        assert_eq!(r.status, 400, "{body}");
        let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains(needle), "{needle:?} not in {msg:?}");
    }
    let r = send("127.0.0.1", port, "PUT", "/lora-adapters", &[], "");
    assert_eq!(r.status, 405);
}
