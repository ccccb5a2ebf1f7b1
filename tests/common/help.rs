//! `llama-server --help` (`../shared/reference/llama-server/help.txt`, beside the checkout as CI
//! has it; `LLAMA_SERVER_HELP` names another copy) read as a list of flags:
//! every spelling, the value each takes, its environment variable and its default, so tests can
//! check our parser against the contract without a list of our own.

use std::path::PathBuf;

/// One entry of the help text (one line of names and its description).
#[derive(Clone, Debug)]
pub struct HelpFlag {
    /// Every spelling: `-t`, `--threads`, `--no-escape`, ...
    pub names: Vec<String>,
    /// The value placeholder (`N`, `FNAME`, `[on|off|auto]`, `START END`), if any.
    pub placeholder: Option<String>,
    /// The `(env: NAME)` variable.
    pub env: Option<String>,
    /// The text after `default: `, up to its closing parenthesis.
    pub default: Option<String>,
}

impl HelpFlag {
    /// The long name that identifies the entry (the first `--` spelling).
    pub fn long(&self) -> &str {
        self.names
            .iter()
            .find(|n| n.starts_with("--"))
            .unwrap_or(&self.names[0])
    }

    /// Whether a value must follow the flag (an optional `[on|off]` need not).
    pub fn takes_value(&self) -> bool {
        self.placeholder.as_deref().is_some_and(|p| {
            !(p.starts_with('[') && p.ends_with(']') && p.contains('|') && !p.contains('<'))
        })
    }

    /// Whether the value names a file or directory.
    pub fn takes_file(&self) -> bool {
        self.placeholder.as_deref().is_some_and(|p| {
            ["FNAME", "FILE", "PATH", "DIR"]
                .iter()
                .any(|w| p.split(|c: char| !c.is_ascii_uppercase()).any(|t| t == *w))
                || p == "JINJA_TEMPLATE_FILE"
        })
    }

    /// The default value when the help text gives a usable one: the first word after
    /// `default: `, quotes removed (`'auto'` → auto, `-1, -1 = infinity` → -1).
    pub fn default_value(&self) -> Option<String> {
        let d = self.default.as_deref()?.trim();
        if let Some(q) = d.strip_prefix('\'').or_else(|| d.strip_prefix('"')) {
            return Some(q.split(['\'', '"']).next().unwrap_or("").to_string());
        }
        let cut = [", ", "; ", " "]
            .iter()
            .filter_map(|sep| d.find(sep))
            .min()
            .unwrap_or(d.len());
        let word = &d[..cut];
        const NOT_VALUES: &[&str] = &[
            "same",
            "unused",
            "disabled",
            "enabled",
            "loaded",
            "read",
            "follows",
            "search",
            "template",
            "value",
            "unset",
            "no",
            "prefill",
            "--cpu-strict-draft",
            "--poll-draft",
        ];
        (!NOT_VALUES.contains(&word)).then(|| word.to_string())
    }
}

/// The help text's path. It is read where the project's shared references live, not copied in.
pub fn help_path() -> PathBuf {
    if let Ok(p) = std::env::var("LLAMA_SERVER_HELP") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/reference/llama-server/help.txt")
}

/// Every entry of the help text, in order.
pub fn llama_server_flags() -> Vec<HelpFlag> {
    let path = help_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (llama-server's --help: set LLAMA_SERVER_HELP, or keep ../shared beside the checkout)",
            path.display()
        )
    });
    let mut out: Vec<(HelpFlag, String)> = Vec::new();
    for line in text.lines() {
        if line.starts_with('-') && !line.starts_with("-----") {
            let (head, desc) = split_head(line);
            let mut names = Vec::new();
            let mut rest_at = head.len();
            let mut pos = 0;
            for tok in head.split(|c: char| c == ',' || c.is_whitespace()) {
                let at = pos;
                pos += tok.len() + 1;
                if tok.is_empty() {
                    continue;
                }
                let is_flag = tok.starts_with('-')
                    && tok
                        .trim_start_matches('-')
                        .starts_with(|c: char| c.is_ascii_alphabetic());
                if is_flag && rest_at == head.len() {
                    names.push(tok.to_string());
                } else if rest_at == head.len() {
                    rest_at = at;
                }
            }
            let placeholder = head[rest_at..].trim();
            let flag = HelpFlag {
                names,
                placeholder: (!placeholder.is_empty()).then(|| placeholder.to_string()),
                env: None,
                default: None,
            };
            out.push((flag, desc.to_string()));
        } else if let Some((_, desc)) = out.last_mut() {
            if line.starts_with(' ') {
                desc.push(' ');
                desc.push_str(line.trim());
            }
        }
    }
    out.into_iter()
        .map(|(mut f, desc)| {
            f.env = desc
                .split("(env: ")
                .nth(1)
                .and_then(|r| r.split(')').next())
                .map(String::from);
            f.default = desc
                .split("default: ")
                .nth(1)
                .and_then(|r| r.split(')').next())
                .map(|d| d.split(" (env:").next().unwrap_or(d).to_string());
            f
        })
        .collect()
}

/// A line's names-and-value part and its description: they are separated by the first run of
/// two or more spaces that does not follow a comma.
fn split_head(line: &str) -> (&str, &str) {
    let b = line.as_bytes();
    for i in 1..b.len().saturating_sub(1) {
        if b[i] == b' ' && b[i + 1] == b' ' && b[i - 1] != b',' && b[i - 1] != b' ' {
            return (&line[..i], line[i..].trim());
        }
    }
    (line.trim_end(), "")
}

/// A plausible value for flags whose help text gives no usable default.
pub fn plausible_value(f: &HelpFlag) -> Option<String> {
    let v = match f.long() {
        "--threads-batch" | "--spec-draft-threads" | "--spec-draft-threads-batch" => "2",
        "--cpu-mask-batch" | "--spec-draft-cpu-mask" | "--spec-draft-cpu-mask-batch" => "ff",
        "--cpu-range" | "--cpu-range-batch" | "--spec-draft-cpu-range" => "0-1",
        "--cpu-strict-batch" | "--spec-draft-cpu-strict" | "--spec-draft-cpu-strict-batch" => "0",
        "--poll-batch" | "--spec-draft-poll" | "--spec-draft-poll-batch" => "1",
        "--rope-scaling" => "none",
        "--rope-scale" | "--rope-freq-scale" => "1",
        "--rope-freq-base" => "10000",
        "--defrag-thold" => "0.1",
        "--rpc" => "localhost:50052",
        "--numa" => "distribute",
        "--device" | "--spec-draft-device" | "--mmproj-device" => "none",
        "--override-tensor" | "--spec-draft-override-tensor" => "exps=CPU",
        "--n-cpu-moe" | "--n-cpu-ffn" | "--spec-draft-n-cpu-moe" => "0",
        "--split-mode" => "layer",
        "--tensor-split" => "3,1",
        "--override-kv" => "tokenizer.ggml.add_bos_token=bool:false",
        "--lora" | "--control-vector" => "adapter.gguf",
        "--lora-scaled" | "--control-vector-scaled" => "adapter.gguf:1",
        "--control-vector-layer-range" => "0 1",
        "--model-url" | "--mmproj-url" => "http://127.0.0.1:1/model.gguf",
        "--docker-repo" => "gemma3",
        "--hf-repo" | "--spec-draft-hf" => "user/model",
        "--hf-token" => "hf_token",
        "--dry-sequence-breaker" => "none",
        "--logit-bias" => "15043+1",
        "--grammar" => "root ::= \"a\"",
        "--json-schema" => "{}",
        "--spec-synth-len" => "2",
        "--spec-synth-rates" => "0.5",
        "--draft" => "16",
        "--draft-min" => "0",
        "--spec-ngram-size-n" => "12",
        "--spec-ngram-size-m" => "48",
        "--spec-ngram-min-hits" => "1",
        "--kv-unified-per-slot" => "256",
        "--reverse-prompt" => "User:",
        "--pooling" => "mean",
        "--image-min-tokens" | "--image-max-tokens" => "256",
        "--alias" => "test-model,test-alias",
        "--tags" => "small,test",
        "--api-key" => "secret",
        "--ui-config" | "--mcp-servers-json" | "--chat-template-kwargs" => "{}",
        "--tools" => "read_file",
        "--chat-template" => "chatml",
        "--reasoning-budget-message" => "stop thinking",
        "--cors-methods" => "GET, POST, DELETE, OPTIONS",
        _ => return f.default_value(),
    };
    Some(v.to_string())
}

/// The arguments that give `f` (spelled `name`) with its plausible value, if it takes one.
pub fn with_value(f: &HelpFlag, name: &str) -> Vec<String> {
    let mut argv = vec![name.to_string()];
    let optional = f.placeholder.is_some() && !f.takes_value();
    if optional {
        // `-fa [on|off|auto]`: the default, as the help text gives it.
        argv.extend(f.default_value());
    } else if f.takes_value() {
        let v = plausible_value(f).unwrap_or_else(|| "1".to_string());
        if f.placeholder.as_deref() == Some("START END") {
            argv.extend(v.split(' ').map(String::from));
        } else {
            argv.push(v);
        }
    }
    argv
}
