//! Comparisons with llama.cpp on the four real test models: every `tokenize` string and every
//! `generate` prompt of `tests/data/reference/<model>.json` must give exactly llama.cpp's ids,
//! and decoding must give the text back.
//!
//! The models are found in `$LLAMAFILE_MODELS` or `~/.cache/llamafile-rs/models`. Without them
//! the tests print a note and pass, unless `LLAMAFILE_REQUIRE_MODELS=1` (CI), where they fail.

use std::path::PathBuf;

use serde::Deserialize;

use super::{DetokenizeOptions, StreamDecoder, Tokenizer};
use crate::gguf::GgufFile;

#[derive(Deserialize)]
struct Reference {
    tokenize: Vec<TokenizeCase>,
    generate: Vec<GenerateCase>,
}

#[derive(Deserialize)]
struct TokenizeCase {
    text: String,
    ids: Vec<u32>,
}

#[derive(Deserialize)]
struct GenerateCase {
    prompt: String,
    prompt_ids: Vec<u32>,
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Step {
    id: u32,
    piece: String,
}

fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("LLAMAFILE_MODELS") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".cache/llamafile-rs/models")
}

/// The model's tokenizer and llama.cpp's reference, or `None` (with a note) when the model is
/// absent and not required.
fn load(model: &str) -> Option<(Tokenizer, Reference)> {
    let path = models_dir().join(format!("{model}.gguf"));
    if !path.exists() {
        let required = std::env::var("LLAMAFILE_REQUIRE_MODELS").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "{} is missing and LLAMAFILE_REQUIRE_MODELS=1",
            path.display()
        );
        eprintln!(
            "skipping {model}: {} not found (run packaging/fetch-models.sh all)",
            path.display()
        );
        return None;
    }
    let gguf = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let started = std::time::Instant::now();
    let tokenizer = Tokenizer::from_gguf(&gguf).unwrap_or_else(|e| panic!("{model}: {e}"));
    eprintln!("{model}: tokenizer built in {:?}", started.elapsed());
    let json = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/data/reference/{model}.json"));
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{}: {e}", json.display()));
    let reference =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", json.display()));
    Some((tokenizer, reference))
}

fn check_model(model: &str) {
    let Some((tok, reference)) = load(model) else {
        return;
    };
    let mut failures = Vec::new();
    let shown = DetokenizeOptions {
        remove_special: true,
        render_special: true,
    };

    for case in &reference.tokenize {
        let ids = tok.encode(&case.text, false, false);
        if ids != case.ids {
            failures.push(format!(
                "tokenize {:?}:\n  got  {ids:?}\n  want {:?}",
                case.text, case.ids
            ));
        }
        let back = tok.decode(&case.ids);
        if back != case.text {
            failures.push(format!("decode {:?} gave {back:?}", case.text));
        }
        // one token at a time: only whole characters, and the same text in the end
        let mut stream = StreamDecoder::new();
        let mut streamed = String::new();
        for &id in &case.ids {
            let chunk = stream.push(&tok, id);
            if chunk.contains('\u{FFFD}') {
                failures.push(format!(
                    "stream {:?} emitted a broken character at id {id}",
                    case.text
                ));
            }
            streamed.push_str(&chunk);
        }
        streamed.push_str(&stream.flush());
        if streamed != case.text {
            failures.push(format!("stream {:?} gave {streamed:?}", case.text));
        }
    }

    for case in &reference.generate {
        let ids = tok.encode(&case.prompt, true, true);
        if ids != case.prompt_ids {
            let first = ids.iter().zip(&case.prompt_ids).position(|(a, b)| a != b);
            failures.push(format!(
                "prompt {:?}: {} ids vs {}, first difference at {first:?}",
                case.prompt.chars().take(60).collect::<String>(),
                ids.len(),
                case.prompt_ids.len()
            ));
        }
        let back = tok.detokenize(&case.prompt_ids, shown);
        if back != case.prompt.as_bytes() {
            failures.push(format!(
                "prompt {:?} does not detokenize back",
                case.prompt.chars().take(60).collect::<String>()
            ));
        }
        for (i, step) in case.steps.iter().enumerate() {
            let piece = String::from_utf8_lossy(tok.token_to_piece(step.id, true));
            if piece != step.piece {
                failures.push(format!(
                    "piece of {}: got {piece:?}, want {:?}",
                    step.id, step.piece
                ));
            }
            let last_of_stopped = i + 1 == case.steps.len() && case.steps.len() < 48;
            if tok.is_eog(step.id) != last_of_stopped {
                failures.push(format!("is_eog({}) should be {last_of_stopped}", step.id));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{model}: {} mismatches with llama.cpp:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// llama-perplexity tokenizes its text with BOS and cuts it into 256-token chunks; the chunk
/// count in `perplexity.md` pins the token count of `ppl-text.txt` to a 256-wide window.
fn check_perplexity_text(model: &str) {
    let Some((tok, _)) = load(model) else { return };
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference");
    let text = std::fs::read_to_string(dir.join("ppl-text.txt")).expect("ppl-text.txt");
    let table = std::fs::read_to_string(dir.join("perplexity.md")).expect("perplexity.md");
    let row = format!("| {model}.gguf |");
    let chunks: usize = table
        .lines()
        .find_map(|line| line.strip_prefix(&row))
        .and_then(|rest| rest.split('|').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no chunk count for {model} in perplexity.md"));
    let started = std::time::Instant::now();
    let ids = tok.encode(&text, true, false);
    eprintln!(
        "{model}: {} bytes -> {} tokens in {:?}",
        text.len(),
        ids.len(),
        started.elapsed()
    );
    assert_eq!(ids.len() / 256, chunks, "{model}: {} tokens", ids.len());
    let strip_bos = DetokenizeOptions {
        remove_special: true,
        render_special: false,
    };
    assert_eq!(
        String::from_utf8_lossy(&tok.detokenize(&ids, strip_bos)),
        text
    );
}

#[test]
fn perplexity_text_token_counts_match_llama_cpp() {
    for model in MODELS {
        check_perplexity_text(model);
    }
}

const MODELS: [&str; 4] = [
    "SmolLM2-135M-Instruct.Q4_1",
    "gemma-3-270m-q4_k_m",
    "qwen2.5-coder-0.5b-instruct",
    "qwen2.5-coder-1.5b-instruct",
];

#[test]
fn smollm2_matches_llama_cpp() {
    check_model("SmolLM2-135M-Instruct.Q4_1");
}

#[test]
fn gemma3_matches_llama_cpp() {
    check_model("gemma-3-270m-q4_k_m");
}

#[test]
fn qwen25_coder_05b_matches_llama_cpp() {
    check_model("qwen2.5-coder-0.5b-instruct");
}

#[test]
fn qwen25_coder_15b_matches_llama_cpp() {
    check_model("qwen2.5-coder-1.5b-instruct");
}

#[test]
fn special_tokens_of_real_models() {
    let Some((qwen, _)) = load("qwen2.5-coder-0.5b-instruct") else {
        return;
    };
    assert_eq!(qwen.token_id("<|im_end|>"), Some(151645));
    assert!(qwen.is_eog(151645) && qwen.is_eog(151643));
    assert!(!qwen.add_bos());
    assert_eq!(qwen.encode("<|im_start|>", false, true), [151644]);
    // user-defined tokens are split out even without parse_special
    assert_eq!(qwen.encode("<tool_call>", false, false), [151657]);
    let Some((smollm, _)) = load("SmolLM2-135M-Instruct.Q4_1") else {
        return;
    };
    assert!(smollm.is_eog(0) && smollm.is_eog(2) && !smollm.is_eog(1));
    assert_eq!(
        (smollm.bos(), smollm.eos(), smollm.add_bos()),
        (Some(1), Some(2), false)
    );
    let Some((gemma, _)) = load("gemma-3-270m-q4_k_m") else {
        return;
    };
    assert_eq!(gemma.bos(), Some(2));
    assert!(
        gemma.add_bos()
            && gemma.is_eog(1)
            && gemma.is_eog(gemma.token_id("<end_of_turn>").unwrap())
    );
    assert_eq!(gemma.encode("", true, false), [2]);
}

/// Gemma's SentencePiece vocabulary on text that spells its special tokens, without
/// `parse_special`: llama.cpp's ids (`llama-tokenize --no-parse-special --ids`, BOS added),
/// recorded in `tests/data/reference/gemma-no-parse-special.json`.
#[test]
fn gemma_spelled_special_tokens_without_parse_special() {
    let Some((gemma, _)) = load("gemma-3-270m-q4_k_m") else {
        return;
    };
    let json = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/reference/gemma-no-parse-special.json");
    let cases: Vec<TokenizeCase> =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert!(cases.len() >= 5);
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            let ids = gemma.encode(&c.text, true, false);
            (ids != c.ids).then(|| format!("{:?}:\n  got  {ids:?}\n  want {:?}", c.text, c.ids))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
