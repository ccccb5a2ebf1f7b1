//! Helpers shared by the integration tests: where the test models and the llama.cpp reference
//! files live, and how a missing model is reported (a failure when CI demands the models).

#![allow(dead_code)]

pub mod help;
pub mod http;
pub mod image_chat;
pub mod llava;
pub mod logit_refs;
#[cfg(target_os = "linux")]
pub mod net;
pub mod picture;
pub mod projector;
pub mod server;
pub mod synth;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The four test models: file stem and llama.cpp's own batched-vs-sequential top-5 logit noise.
pub const MODELS: [(&str, f64); 4] = [
    ("SmolLM2-135M-Instruct.Q4_1", 0.047),
    ("gemma-3-270m-q4_k_m", 0.195),
    ("qwen2.5-coder-0.5b-instruct", 0.057),
    ("qwen2.5-coder-1.5b-instruct", 0.076),
];

/// Directory holding the cached GGUF models.
pub fn models_dir() -> PathBuf {
    if let Ok(d) = std::env::var("LLAMAFILE_MODELS") {
        return PathBuf::from(d);
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    PathBuf::from(home).join(".cache/llamafile-rs/models")
}

/// The path of model `stem`, or `None` (after saying so) when it is absent and not required.
/// Panics when it is absent and `LLAMAFILE_REQUIRE_MODELS=1`.
pub fn model_path(stem: &str) -> Option<PathBuf> {
    let p = models_dir().join(format!("{stem}.gguf"));
    if p.exists() {
        return Some(p);
    }
    if std::env::var("LLAMAFILE_REQUIRE_MODELS").as_deref() == Ok("1") {
        panic!(
            "test model {} is missing: run packaging/fetch-models.sh all",
            p.display()
        );
    }
    eprintln!(
        "skipping: {} not found (run packaging/fetch-models.sh all)",
        p.display()
    );
    None
}

/// The reference data directory (copied from llama.cpp runs; see its README).
pub fn reference_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference")
}

/// The parsed reference JSON of model `stem`.
pub fn reference(stem: &str) -> serde_json::Value {
    let p = reference_dir().join(format!("{stem}.json"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

/// llama-perplexity's figure for model `stem` from perplexity.md.
pub fn reference_ppl(stem: &str) -> f64 {
    let text = std::fs::read_to_string(reference_dir().join("perplexity.md")).unwrap();
    let prefix = format!("| {stem}.gguf |");
    let line = text
        .lines()
        .find(|l| l.starts_with(&prefix))
        .expect("model in perplexity.md");
    line.split('|')
        .nth(3)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Runs the `llamafile` binary with `args` and waits for it.
pub fn llamafile(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_llamafile"))
        .args(args)
        .output()
        .expect("run llamafile")
}

/// Asserts a failed run that explains itself in exactly one stderr line containing `needle`
/// (compared without case).
pub fn assert_one_line_error(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!out.status.success(), "expected failure, stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    assert_eq!(lines.len(), 1, "want one line, got: {stderr}");
    assert!(
        lines[0].to_lowercase().contains(&needle.to_lowercase()),
        "{needle:?} not in {:?}",
        lines[0]
    );
}

/// Tokens a run generated, from the summary `--verbose` prints ("generation N tokens" counts
/// those after the first).
pub fn generated_tokens(stderr: &str) -> usize {
    let n: usize = stderr
        .split("generation ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no timing summary in {stderr}"));
    n + 1
}

/// Runs the `llamafile` binary with `args`, writing `input` to its stdin (a `--chat` session).
pub fn llamafile_with_input(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_llamafile"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run llamafile");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input)
        .expect("write stdin");
    child.wait_with_output().expect("wait for llamafile")
}

/// A field of /proc/PID/status (`"VmRSS:"`, `"VmLck:"`, ...), in KiB; 0 when it cannot be read.
pub fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The perplexity on `--perplexity`'s last line (`Final estimate: PPL = X +/- Y`), as
/// llama-perplexity prints it.
pub fn final_ppl(stdout: &[u8]) -> f64 {
    let stdout = String::from_utf8_lossy(stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("Final estimate: PPL = "))
        .expect("final line");
    line.split_whitespace().nth(4).unwrap().parse().unwrap()
}
