//! Quantized KV caches (`-ctk`/`-ctv`) on a real model (SmolLM2-135M): perplexity with q8_0,
//! q4_0 and iq4_nl caches against the f16 cache, a sequence saved and restored with a quantized
//! cache, a context shift over one, and the one-line refusals (a quantized V cache with
//! `--flash-attn off`, a saved cache read back with other types).
//!
//! Perplexity is checked against llama.cpp's own on the same text and context (the first 6 kB
//! of the reference text, `-c 128`, `llama-perplexity -ctk T -ctv T -fa on`, llama.cpp
//! 0c1e570): 23.9134 (f16), 24.2676 (q8_0), 25.2601 (q4_0), 24.7933 (iq4_nl). Ours must be
//! within 1% of each (they match to all printed digits when written), and the quantized ones
//! must differ from f16. iq4_nl must be within 0.1%: its key dot product summed in another
//! float order than ggml's once, which put SmolLM2 1.9% off on a longer text.

mod common;

use common::{assert_one_line_error, llamafile, model_path, reference_dir};
use llamafile::backend::{KvType, KvTypes};
use llamafile::engine::load_model;
use llamafile::engine::session::{Session, SessionStateError};

const SMOLLM: &str = "SmolLM2-135M-Instruct.Q4_1";

fn ppl(model: &str, text: &str, ty: &str) -> f64 {
    let out = llamafile(&[
        "-m",
        model,
        "--perplexity",
        "-f",
        text,
        "-c",
        "128",
        "-ctk",
        ty,
        "-ctv",
        ty,
    ]);
    assert!(
        out.status.success(),
        "{ty}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    common::final_ppl(&out.stdout)
}

#[test]
fn quantized_caches_keep_perplexity_near_f16() {
    let Some(m) = model_path(SMOLLM) else { return };
    let full = std::fs::read(reference_dir().join("ppl-text.txt")).unwrap();
    let text = std::env::temp_dir().join(format!("kv-ppl-{}.txt", std::process::id()));
    std::fs::write(&text, &full[..6000]).unwrap();
    let (m, text) = (m.to_str().unwrap(), text.to_str().unwrap());
    let f16 = ppl(m, text, "f16");
    for (ty, llama_cpp) in [
        ("f16", 23.9134),
        ("q8_0", 24.2676),
        ("q4_0", 25.2601),
        ("iq4_nl", 24.7933),
    ] {
        let ours = if ty == "f16" { f16 } else { ppl(m, text, ty) };
        assert!(
            (ours / llama_cpp - 1.0).abs() < 0.01,
            "{ty}: {ours} vs llama.cpp {llama_cpp}"
        );
        assert!(ty == "f16" || ours != f16, "{ty} equals f16: {ours}");
        assert!(
            ty != "iq4_nl" || (ours / llama_cpp - 1.0).abs() < 0.001,
            "iq4_nl: {ours} vs llama.cpp {llama_cpp} (the dot product's float order?)"
        );
    }
}

#[test]
fn a_quantized_v_cache_needs_flash_attention() {
    let Some(m) = model_path(SMOLLM) else { return };
    let m = m.to_str().unwrap();
    assert_one_line_error(
        &llamafile(&["-m", m, "-p", "hi", "-n", "1", "-ctv", "q8_0", "-fa", "off"]),
        "quantized V cache requires flash_attn to be enabled",
    );
    // quantized keys alone, and auto, are fine
    for extra in [
        ["-ctk", "q8_0", "-fa", "off"],
        ["-ctv", "q4_1", "-fa", "auto"],
    ] {
        let mut args = vec!["-m", m, "-p", "Hello", "-n", "4", "--temp", "0"];
        args.extend(extra);
        let out = llamafile(&args);
        assert!(
            out.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_quantized_cache_saves_restores_and_shifts() {
    let Some(path) = model_path(SMOLLM) else {
        return;
    };
    let mut m = load_model(path.to_str().unwrap(), None).unwrap();
    let prompt = m.tokenizer.encode(
        "The quick brown fox jumps over the lazy dog because",
        true,
        false,
    );
    let types = KvTypes {
        k: KvType::Q8_0,
        v: KvType::Q5_1,
    };
    m.model.set_kv_types(types).unwrap();
    let mut a = Session::new(&m.model, 64, 512);
    a.feed(&prompt, false).unwrap();
    let mut saved = Vec::new();
    let n = a.write_state(&mut saved).unwrap();
    assert_eq!(n, saved.len() as u64);
    // the rows are stored quantized: 34 + 24 bytes per 32 values instead of 128
    let kv = m.model.config.kv_dim();
    let layers = m.model.config.n_layer;
    let rows = layers * prompt.len() * kv / 32 * (34 + 24);
    assert_eq!(saved.len(), 8 + 4 * prompt.len() + 24 + rows);

    let mut b = Session::new(&m.model, 64, 512);
    b.read_state(&mut saved.as_slice()).unwrap();
    let next = [prompt[1]];
    assert_eq!(a.feed(&next, false).unwrap(), b.feed(&next, false).unwrap());

    // a context shift re-encodes the moved keys and generation goes on
    assert!(
        llamafile::engine::session::shift_context(&m.model, &mut b.cache, &mut b.tokens, 2)
            .unwrap()
    );
    let logits = b.feed(&next, false).unwrap();
    assert!(logits.iter().all(|x| x.is_finite()));

    // the same bytes into an f16 cache are refused, naming both types
    m.model.set_kv_types(KvTypes::default()).unwrap();
    let mut c = Session::new(&m.model, 64, 512);
    match c.read_state(&mut saved.as_slice()) {
        Err(SessionStateError::Cache(e)) => assert_eq!(
            e.to_string(),
            "the KV cache was saved with cache types K q8_0, V q5_1; this one has K f16, V f16 (-ctk/-ctv)"
        ),
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert!(c.tokens.is_empty());
}
