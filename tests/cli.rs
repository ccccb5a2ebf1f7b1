//! The `llamafile` command line as a user meets it: malformed model files, missing files, unknown
//! architectures, missing tensors and unknown flags each give one clear line and a non-zero exit;
//! prompt handling (`-f`, escapes), `--tokenize`, `--trace-tokens`, `--perplexity` and seeded
//! sampling behave as llama.cpp's tools do.

mod common;

use common::{
    assert_one_line_error, generated_tokens, llamafile, llamafile_with_input, model_path,
};
use llamafile::gguf::GgufWriter;
use llamafile::quant::GgmlType;
use std::path::{Path, PathBuf};
use std::process::Output;

const SMOLLM: &str = "SmolLM2-135M-Instruct.Q4_1";

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("llamafile-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A small, well-formed llama GGUF (no tokenizer: loading fails later, on purpose, if at all).
fn tiny_llama(arch: &str, skip_tensor: Option<&str>) -> Vec<u8> {
    tiny_llama_with(arch, skip_tensor, &[])
}

/// [`tiny_llama`] with `extra` F32 tensors (name, dims) added after the model's own.
fn tiny_llama_with(arch: &str, skip_tensor: Option<&str>, extra: &[(&str, Vec<u64>)]) -> Vec<u8> {
    tiny_llama_kv(arch, skip_tensor, extra, &[])
}

/// [`tiny_llama_with`] with extra string metadata `ARCH.KEY = VALUE`.
fn tiny_llama_kv(
    arch: &str,
    skip_tensor: Option<&str>,
    extra: &[(&str, Vec<u64>)],
    kv: &[(&str, &str)],
) -> Vec<u8> {
    let (e, ff, vocab) = (32u64, 64u64, 8u64);
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", arch);
    for (k, v) in kv {
        w.add_kv(format!("{arch}.{k}"), *v);
    }
    for (k, v) in [
        ("embedding_length", e),
        ("block_count", 1),
        ("attention.head_count", 2),
        ("attention.head_count_kv", 1),
        ("feed_forward_length", ff),
        ("vocab_size", vocab),
    ] {
        w.add_kv(format!("{arch}.{k}"), v as u32);
    }
    let f32s = |n: u64| vec![0u8; n as usize * 4];
    let mut tensors: Vec<(&str, Vec<u64>)> = vec![
        ("token_embd.weight", vec![e, vocab]),
        ("blk.0.attn_norm.weight", vec![e]),
        ("blk.0.attn_q.weight", vec![e, e]),
        ("blk.0.attn_k.weight", vec![e, e / 2]),
        ("blk.0.attn_v.weight", vec![e, e / 2]),
        ("blk.0.attn_output.weight", vec![e, e]),
        ("blk.0.ffn_norm.weight", vec![e]),
        ("blk.0.ffn_gate.weight", vec![e, ff]),
        ("blk.0.ffn_up.weight", vec![e, ff]),
        ("blk.0.ffn_down.weight", vec![ff, e]),
        ("output_norm.weight", vec![e]),
    ];
    tensors.extend(extra.iter().cloned());
    for (name, dims) in tensors {
        if Some(name) == skip_tensor {
            continue;
        }
        let n: u64 = dims.iter().product();
        w.add_tensor(name, &dims, GgmlType::F32, f32s(n)).unwrap();
    }
    w.to_bytes().unwrap()
}

fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let p = scratch(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn run_model(path: &Path) -> Output {
    llamafile(&["-m", path.to_str().unwrap(), "-p", "hi", "-n", "1"])
}

/// Byte offset just after the first occurrence of `needle`.
fn after(bytes: &[u8], needle: &[u8]) -> usize {
    bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
        + needle.len()
}

#[test]
fn bad_magic() {
    let mut b = tiny_llama("llama", None);
    b[..4].copy_from_slice(b"GGUX");
    assert_one_line_error(
        &run_model(&write("case-1.gguf", &b)),
        "its magic is \"GGUX\"",
    );
}

#[test]
fn unsupported_version() {
    let mut b = tiny_llama("llama", None);
    b[4..8].copy_from_slice(&7u32.to_le_bytes());
    assert_one_line_error(&run_model(&write("case-2.gguf", &b)), "version");
}

#[test]
fn truncated_header_and_string() {
    let b = tiny_llama("llama", None);
    assert_one_line_error(&run_model(&write("case-3.gguf", &b[..20])), "truncated");
    let cut = after(&b, b"general.arch");
    assert_one_line_error(&run_model(&write("case-4.gguf", &b[..cut])), "truncated");
}

#[test]
fn unknown_value_type() {
    let mut b = tiny_llama("llama", None);
    let at = after(&b, b"general.architecture");
    b[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
    assert_one_line_error(
        &run_model(&write("case-5.gguf", &b)),
        "general.architecture",
    );
}

/// Offset of the tensor info field `field` (0: type, 1: data offset) of 1-D tensor `name`.
fn tensor_field(bytes: &[u8], name: &str, n_dims: usize, field: usize) -> usize {
    after(bytes, name.as_bytes()) + 4 + 8 * n_dims + field * 4
}

#[test]
fn unknown_tensor_type() {
    let mut b = tiny_llama("llama", None);
    let at = tensor_field(&b, "output_norm.weight", 1, 0);
    b[at..at + 4].copy_from_slice(&77u32.to_le_bytes());
    assert_one_line_error(&run_model(&write("case-6.gguf", &b)), "output_norm.weight");
}

#[test]
fn dimensions_that_overflow() {
    let mut b = tiny_llama("llama", None);
    let at = after(&b, b"blk.0.attn_q.weight") + 4;
    b[at..at + 8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    b[at + 8..at + 16].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    assert_one_line_error(&run_model(&write("case-7.gguf", &b)), "blk.0.attn_q.weight");
}

#[test]
fn tensor_data_past_end_of_file() {
    let b = tiny_llama("llama", None);
    let cut = b.len() - 64;
    assert_one_line_error(
        &run_model(&write("case-8.gguf", &b[..cut])),
        "output_norm.weight",
    );
}

#[test]
fn misaligned_tensor_data() {
    let mut b = tiny_llama("llama", None);
    let at = tensor_field(&b, "output_norm.weight", 1, 1);
    let off = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    b[at..at + 8].copy_from_slice(&(off + 4).to_le_bytes());
    assert_one_line_error(&run_model(&write("case-9.gguf", &b)), "output_norm.weight");
}

#[test]
fn missing_file() {
    assert_one_line_error(
        &run_model(Path::new("/nonexistent/model.gguf")),
        "/nonexistent/model.gguf",
    );
}

#[test]
fn unknown_architecture() {
    let b = tiny_llama("mamba9", None);
    assert_one_line_error(&run_model(&write("case-10.gguf", &b)), "mamba9");
}

#[test]
fn missing_tensor() {
    let b = tiny_llama("llama", Some("blk.0.ffn_up.weight"));
    assert_one_line_error(
        &run_model(&write("case-11.gguf", &b)),
        "blk.0.ffn_up.weight",
    );
}

#[test]
fn tensor_the_engine_would_ignore() {
    // A tensor the forward pass does not read asks for math this engine does not do (here an
    // expert router in a file whose metadata has no experts, and RoPE factors in an
    // architecture that has none): running
    // without it would be a guess, so the file is refused, naming the tensor.
    let b = tiny_llama_with("llama", None, &[("blk.0.ffn_gate_inp.weight", vec![32, 8])]);
    assert_one_line_error(
        &run_model(&write("case-12.gguf", &b)),
        "blk.0.ffn_gate_inp.weight",
    );
    let b = tiny_llama_with("qwen2", None, &[("rope_freqs.weight", vec![8])]);
    assert_one_line_error(&run_model(&write("case-13.gguf", &b)), "rope_freqs.weight");
}

#[test]
fn rope_factors_of_the_wrong_length() {
    // Llama 3's rope_freqs must hold one factor per rotated pair (head size 16: 8).
    let b = tiny_llama_with("llama", None, &[("rope_freqs.weight", vec![5])]);
    assert_one_line_error(&run_model(&write("case-14.gguf", &b)), "rope_freqs.weight");
}

#[test]
fn rope_scaling_not_implemented() {
    // YaRN is built, except beside sliding-window layers (gemma2, gemma3).
    let b = tiny_llama_kv("gemma2", None, &[], &[("rope.scaling.type", "yarn")]);
    let out = run_model(&write("case-15.gguf", &b));
    assert_one_line_error(&out, "YaRN");
    assert_one_line_error(&out, "sliding-window");
    let b = tiny_llama_kv("qwen3", None, &[], &[("rope.scaling.type", "dynamic-ntk")]);
    assert_one_line_error(&run_model(&write("case-16.gguf", &b)), "dynamic-ntk");
}

#[test]
fn unknown_flag_and_bad_value() {
    assert_one_line_error(
        &llamafile(&["--definitely-not-a-flag"]),
        "--definitely-not-a-flag",
    );
    assert_one_line_error(&llamafile(&["-n", "many"]), "many");
}

fn tokenize(model: &Path, extra: &[&str]) -> Vec<u32> {
    let mut args = vec!["-m", model.to_str().unwrap(), "--tokenize"];
    args.extend_from_slice(extra);
    let out = llamafile(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn prompt_file_drops_one_newline_and_escapes_apply() {
    let Some(m) = model_path(SMOLLM) else { return };
    let file = write("prompt.txt", b"Hello world\n");
    let plain = tokenize(&m, &["-p", "Hello world"]);
    assert_eq!(tokenize(&m, &["-f", file.to_str().unwrap()]), plain);
    let two = write("prompt2.txt", b"Hello world\n\n");
    assert_eq!(
        tokenize(&m, &["-f", two.to_str().unwrap()]),
        tokenize(&m, &["-p", "Hello world\n"])
    );
    // "\n" in -p is a newline unless --no-escape
    let escaped = tokenize(&m, &["-p", r"a\nb"]);
    assert_eq!(escaped, tokenize(&m, &["-p", "a\nb", "--no-escape"]));
    assert_ne!(escaped, tokenize(&m, &["-p", r"a\nb", "--no-escape"]));
    // special tokens are parsed unless --no-parse-special
    let special = tokenize(&m, &["-p", "<|im_start|>"]);
    assert_eq!(special.len(), 1);
    assert!(tokenize(&m, &["-p", "<|im_start|>", "--no-parse-special"]).len() > 1);
}

#[test]
fn trace_tokens_lines() {
    let Some(m) = model_path(SMOLLM) else { return };
    let trace = scratch("trace.jsonl");
    let out = llamafile(&[
        "-m",
        m.to_str().unwrap(),
        "-p",
        "The capital of France is",
        "-n",
        "4",
        "--temp",
        "0",
        "--trace-tokens",
        trace.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    let mut pieces = String::new();
    for l in &lines {
        let top = l["top"].as_array().unwrap();
        assert_eq!(top.len(), 5);
        assert_eq!(top[0][0], l["id"], "greedy picks the top logit");
        let logits: Vec<f64> = top.iter().map(|t| t[1].as_f64().unwrap()).collect();
        assert!(logits.windows(2).all(|w| w[0] >= w[1]), "top is sorted");
        pieces.push_str(l["piece"].as_str().unwrap());
    }
    assert_eq!(String::from_utf8_lossy(&out.stdout), pieces);
}

#[test]
fn perplexity_prints_final_estimate() {
    let Some(m) = model_path(SMOLLM) else { return };
    let text = common::reference_dir().join("ppl-text.txt");
    let out = llamafile(&[
        "-m",
        m.to_str().unwrap(),
        "--perplexity",
        "-f",
        text.to_str().unwrap(),
        "-c",
        "128",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ppl = common::final_ppl(&out.stdout);
    assert!(ppl > 1.0 && ppl < 100.0, "{ppl}");
    // too little text for the context is a clear error
    let short = write("short.txt", b"too short\n");
    assert_one_line_error(
        &llamafile(&[
            "-m",
            m.to_str().unwrap(),
            "--perplexity",
            "-f",
            short.to_str().unwrap(),
        ]),
        "tokens",
    );
}

#[test]
fn fixed_seed_reproduces_sampling() {
    let Some(m) = model_path(SMOLLM) else { return };
    let run = |seed: &str| {
        let out = llamafile(&[
            "-m",
            m.to_str().unwrap(),
            "-p",
            "Once upon a time",
            "-n",
            "24",
            "--seed",
            seed,
            "--temp",
            "1.0",
        ]);
        assert!(out.status.success());
        out.stdout
    };
    assert_eq!(run("42"), run("42"));
}

#[test]
fn prompt_longer_than_context() {
    let Some(m) = model_path(SMOLLM) else { return };
    let long = "word ".repeat(200);
    assert_one_line_error(
        &llamafile(&["-m", m.to_str().unwrap(), "-p", &long, "-c", "64"]),
        "context",
    );
}

#[test]
fn verbose_reports_time_to_first_token() {
    let Some(m) = model_path(SMOLLM) else { return };
    let out = llamafile(&[
        "-m",
        m.to_str().unwrap(),
        "-p",
        "The capital of France is",
        "-n",
        "3",
        "--temp",
        "0",
        "--verbose",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("first token at"))
        .unwrap_or_else(|| panic!("no timing summary in {stderr}"));
    // Three tokens generated: the first from the prompt's logits, two from the decode loop.
    let n_prompt = tokenize(&m, &["-p", "The capital of France is"]).len();
    assert!(
        line.contains(&format!("prompt {n_prompt} tokens in")),
        "{line}"
    );
    assert!(line.contains("generation 2 tokens in"), "{line}");
    let ms = |key: &str| -> f64 {
        let rest = &line[line.find(key).unwrap() + key.len()..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    let (load, first, total) = (ms("load "), ms("first token at "), ms("total "));
    assert!(load <= first && first <= total, "{line}");
}

#[test]
fn chat_template_errors_are_one_line() {
    let Some(m) = model_path(SMOLLM) else { return };
    let m = m.to_str().unwrap();
    for (args, needle) in [
        (
            &["--chat-template", "no-such-format"][..],
            "not a built-in format",
        ),
        (&["--chat-template", "{% for %}"], "does not compile"),
        (
            &["--chat-template-file", "/nonexistent/t.jinja"],
            "cannot read chat template file",
        ),
        // As in llama.cpp, the later of the two wins.
        (
            &["--chat-template", "chatml", "--chat-template-file", "x"],
            "cannot read chat template file x",
        ),
    ] {
        let mut argv = vec!["-m", m, "--chat", "--port", "0"];
        argv.extend_from_slice(args);
        assert_one_line_error(&llamafile(&argv), needle);
    }
}

#[test]
fn reverse_prompt_ignore_eos_and_specials() {
    let Some(m) = model_path(SMOLLM) else { return };
    let m = m.to_str().unwrap();
    let out = llamafile(&[
        "-m", m, "-p", "1, 2, 3,", "-n", "40", "--temp", "0", "-r", "7,",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("7,"), "{text:?}");
    assert!(text.len() < 20, "{text:?}");

    let chat = "<|im_start|>user\nWhat is 2+2? Reply with just the number.<|im_end|>\n<|im_start|>assistant\n";
    let tokens = |extra: &[&str]| {
        let mut argv = vec!["-m", m, "-p", chat, "-n", "40", "--temp", "0", "--verbose"];
        argv.extend_from_slice(extra);
        let out = llamafile(&argv);
        let n = generated_tokens(&String::from_utf8_lossy(&out.stderr));
        (n, String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (n_plain, _) = tokens(&[]);
    assert!(
        n_plain < 40,
        "SmolLM2 answers in fewer than 40 tokens ({n_plain})"
    );
    let (n_ignore, _) = tokens(&["--ignore-eos"]);
    assert_eq!(n_ignore, 40);
    // Token 1 is <|im_start|>, a control token: hidden unless -sp.
    let forced = |extra: &[&str]| {
        let mut argv = vec!["-m", m, "-p", "hi", "-n", "3", "-l", "1+100"];
        argv.extend_from_slice(extra);
        String::from_utf8_lossy(&llamafile(&argv).stdout).into_owned()
    };
    assert_eq!(forced(&["-sp"]), "<|im_start|>".repeat(3));
    assert_eq!(forced(&[]), "");
}

#[test]
fn chat_drops_the_oldest_turns_when_the_context_fills() {
    let Some(m) = model_path(SMOLLM) else { return };
    let out = llamafile_with_input(
        &[
            "-m",
            m.to_str().unwrap(),
            "--chat",
            "-c",
            "256",
            "-n",
            "80",
            "--temp",
            "0",
        ],
        b"Tell me about the history of Rome in detail.\nAnd Greece?\nAnd Egypt?\nAnd Persia?\n",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let transcript = String::from_utf8(out.stdout).unwrap();
    assert!(
        transcript.contains("[dropped the 2 oldest messages"),
        "{transcript}"
    );
    // Every question got an answer: five prompts (the last one meets end of input).
    let turns: Vec<&str> = transcript.split("> ").collect();
    assert_eq!(turns.len(), 6, "{transcript}");
    assert!(
        turns[1..5].iter().all(|t| t.trim().len() > 20),
        "{transcript}"
    );
}

#[test]
fn bench_prints_llama_bench_rows() {
    let Some(m) = model_path(SMOLLM) else { return };
    let m = m.to_str().unwrap();
    let out = llamafile(&[
        "--bench", "-m", m, "-p", "32", "-n", "4", "-pg", "16,4", "-r", "2", "-fa", "1", "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let got: Vec<(u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["n_prompt"].as_u64().unwrap(),
                r["n_gen"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, vec![(32, 0), (0, 4), (16, 4)]);
    for r in &rows {
        assert!(r["avg_ts"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["stddev_ts"].as_f64().unwrap() >= 0.0, "{r}");
        assert_eq!(r["samples_ts"].as_array().unwrap().len(), 2, "{r}");
    }
    let md = llamafile(&["--bench", "-m", m, "-p", "16", "-n", "0", "-r", "1"]);
    let table = String::from_utf8_lossy(&md.stdout);
    assert!(
        table.contains("| model") && table.contains("pp16"),
        "{table}"
    );
    assert_one_line_error(
        &llamafile(&["--bench", "-m", m, "-pg", "16"]),
        "-pg takes a prompt size",
    );
}

#[test]
fn chat_system_prompt_from_sys_or_p() {
    let Some(m) = model_path(SMOLLM) else { return };
    let m = m.to_str().unwrap();
    let chat = |extra: &[&str]| {
        let mut argv = vec!["-m", m, "--chat", "-n", "24", "--temp", "0"];
        argv.extend_from_slice(extra);
        let out = llamafile_with_input(&argv, b"Who are you?\n");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let system = "You are a pirate. Answer like one.";
    let with_sys = chat(&["-sys", system]);
    assert_eq!(with_sys, chat(&["-p", system]));
    assert_ne!(
        with_sys,
        chat(&[]),
        "the system prompt reaches the template"
    );
    // --chat-template replaces the model's own template in the terminal chat too.
    assert_ne!(chat(&["--chat-template", "llama2"]), chat(&[]));
}

#[test]
fn weights_read_into_memory_generate_as_mapped_ones() {
    let Some(m) = model_path(SMOLLM) else { return };
    let m = m.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut argv = vec![
            "-m",
            m,
            "-p",
            "The capital of France is",
            "-n",
            "16",
            "--temp",
            "0",
        ];
        argv.extend_from_slice(extra);
        let out = llamafile(&argv);
        assert!(
            out.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let mapped = run(&[]);
    assert!(!mapped.is_empty());
    assert_eq!(run(&["--no-mmap"]), mapped, "--no-mmap");
    assert_eq!(run(&["-lm", "none"]), mapped, "-lm none");
}
