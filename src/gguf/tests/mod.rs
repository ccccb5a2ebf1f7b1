//! Tests of the GGUF reader and writer, and helpers to build valid files and corrupt them.

mod fuzz;
mod malformed;
mod real_models;
mod round_trip;

use super::{Array, GgufError, GgufFile, GgufWriter, Value};
use crate::quant::GgmlType;

/// A small valid GGUF: a few keys of different types and three tensors of different types.
fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "llama")
        .add_kv("llama.block_count", 2u32)
        .add_kv("dup.a", 1u8)
        .add_kv("dup.b", 2u8)
        .add_kv("tokenizer.ggml.tokens", vec!["<s>", "hello", "world"])
        .add_kv("tokenizer.ggml.scores", vec![0.0f32, -1.5, -2.5])
        .add_kv(
            "nested",
            Value::Array(Array::Array(vec![
                Array::from(vec![1i32, 2]),
                Array::from(vec![3u8]),
            ])),
        );
    w.add_tensor("token_embd.weight", &[4, 3], GgmlType::F32, f32_bytes(12))
        .unwrap();
    w.add_tensor(
        "blk.0.attn_q.weight",
        &[32, 2],
        GgmlType::Q4_0,
        vec![7u8; 36],
    )
    .unwrap();
    w.add_tensor("output_norm.weight", &[5], GgmlType::F16, vec![1u8; 10])
        .unwrap();
    w
}

fn sample_bytes() -> Vec<u8> {
    sample_writer().to_bytes().unwrap()
}

/// `n` distinct f32 values as little-endian bytes.
fn f32_bytes(n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
        .collect()
}

/// Offset of the first occurrence of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{:?} not found", String::from_utf8_lossy(needle)))
}

/// Offset just past the string `s` (its bytes, not its length prefix) in `bytes`.
fn after(bytes: &[u8], s: &str) -> usize {
    find(bytes, s.as_bytes()) + s.len()
}

fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The error parsing `bytes` gives; fails the test if they parse.
fn parse_err(bytes: Vec<u8>) -> GgufError {
    match GgufFile::from_bytes(bytes) {
        Ok(f) => panic!("expected an error, parsed {f:?}"),
        Err(e) => e,
    }
}

/// A fresh path in the temp directory for this test.
fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("llamafile-gguf-{}-{name}", std::process::id()))
}
