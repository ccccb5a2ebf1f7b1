//! Smoke checks against the real models in ~/.cache/llamafile-rs/models, when present (they are
//! fetched by a script; the thorough real-model tests live elsewhere).

use std::path::PathBuf;

use super::*;

fn model(name: &str) -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("HOME")?)
        .join(".cache/llamafile-rs/models")
        .join(name);
    if path.exists() {
        Some(path)
    } else {
        eprintln!("skipping: {} is absent", path.display());
        None
    }
}

/// Opens `name` and checks facts every model file must satisfy plus the given ones.
fn check(name: &str, arch: &str, n_vocab: usize, n_tensors: usize) {
    let Some(path) = model(name) else { return };
    let start = std::time::Instant::now();
    let f = GgufFile::open(&path).unwrap();
    eprintln!("{name}: parsed in {:?}: {f:?}", start.elapsed());
    assert_eq!(f.architecture(), Some(arch));
    assert_eq!(
        f.get_str_array("tokenizer.ggml.tokens").map(<[_]>::len),
        Some(n_vocab)
    );
    assert_eq!(f.tensors().len(), n_tensors);
    let embd = f.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.dims[1], n_vocab as u64);
    let mut total = 0;
    for t in f.tensors() {
        total += f.tensor_data(t).len() as u64;
    }
    assert!(total <= f.bytes().len() as u64 - f.data_offset());
    let block_count = f.get_u32(&format!("{arch}.block_count")).unwrap();
    assert!(f
        .tensor(&format!("blk.{}.attn_q.weight", block_count - 1))
        .is_some());
}

#[test]
fn smollm2_135m() {
    check("SmolLM2-135M-Instruct.Q4_1.gguf", "llama", 49152, 272);
}

#[test]
fn gemma3_270m() {
    check("gemma-3-270m-q4_k_m.gguf", "gemma3", 262144, 236);
}

#[test]
fn qwen25_coder_05b() {
    check("qwen2.5-coder-0.5b-instruct.gguf", "qwen2", 151936, 291);
}
