//! The command line: one clap parser with llama.cpp's flag names, shared by every mode, then
//! validation into typed options. llama.cpp's multi-letter short flags (`-ngl`, `-np`, ...) are
//! rewritten to their long forms before clap sees them.

use clap::Parser;
use std::ffi::OsString;
use std::path::PathBuf;

/// Raw flags as typed by the user.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "llamafile",
    version,
    about = "Run a GGUF language model from one file",
    disable_help_subcommand = true,
    // As in llama.cpp, a later flag overrides an earlier one: the user's arguments override
    // the defaults from `.args` that come before them.
    args_override_self = true
)]
pub struct Cli {
    /// Model: a GGUF file, a llamafile, or an entry of this executable's own ZIP.
    #[arg(short = 'm', long = "model", value_name = "FNAME")]
    pub model: Option<String>,

    /// Prompt text.
    #[arg(short = 'p', long = "prompt", allow_hyphen_values = true)]
    pub prompt: Option<String>,

    /// Read the prompt from a file (one trailing newline is dropped).
    #[arg(short = 'f', long = "file", value_name = "FNAME")]
    pub file: Option<PathBuf>,

    /// Tokens to generate (-1: until end of generation or a full context).
    #[arg(short = 'n', long = "n-predict", visible_alias = "predict", default_value_t = -1, allow_negative_numbers = true)]
    pub n_predict: i64,

    /// Context size in tokens (0: the model's training context).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    pub ctx_size: usize,

    /// Logical batch size: most tokens fed to one forward pass.
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    pub batch_size: usize,

    /// Physical batch size (accepted for compatibility; prefill uses --batch-size chunks).
    #[arg(long = "ubatch-size", default_value_t = 512)]
    pub ubatch_size: usize,

    /// Threads (default: the number of CPU cores).
    #[arg(short = 't', long = "threads")]
    pub threads: Option<usize>,

    /// Random seed (-1: a random one).
    #[arg(short = 's', long = "seed", default_value_t = -1, allow_negative_numbers = true)]
    pub seed: i64,

    /// Temperature (0: greedy).
    #[arg(long = "temp", default_value_t = 0.8, allow_negative_numbers = true)]
    pub temp: f32,

    /// Top-k sampling (0: off).
    #[arg(long = "top-k", default_value_t = 40)]
    pub top_k: i32,

    /// Top-p sampling (1.0: off).
    #[arg(long = "top-p", default_value_t = 0.95)]
    pub top_p: f32,

    /// Min-p sampling (0.0: off).
    #[arg(long = "min-p", default_value_t = 0.05)]
    pub min_p: f32,

    /// Repetition penalty (1.0: off).
    #[arg(long = "repeat-penalty", default_value_t = 1.0)]
    pub repeat_penalty: f32,

    /// Tokens the repetition penalty looks back over (0: off, -1: whole context).
    #[arg(
        long = "repeat-last-n",
        default_value_t = 64,
        allow_negative_numbers = true
    )]
    pub repeat_last_n: i32,

    /// Process escape sequences (\n, \t, \xHH, ...) in the prompt (the default).
    #[arg(short = 'e', long = "escape", overrides_with = "no_escape")]
    pub escape: bool,

    /// Take the prompt literally.
    #[arg(long = "no-escape")]
    pub no_escape: bool,

    /// Print the prompt's token ids as a JSON array and exit.
    #[arg(long = "tokenize")]
    pub tokenize: bool,

    /// With --tokenize: do not add the BOS token.
    #[arg(long = "no-bos")]
    pub no_bos: bool,

    /// With --tokenize: treat special-token text as plain text.
    #[arg(long = "no-parse-special")]
    pub no_parse_special: bool,

    /// Compute perplexity over the prompt text in --ctx-size chunks (llama-perplexity's method).
    #[arg(long = "perplexity")]
    pub perplexity: bool,

    /// Write one JSON line per generated token (id, piece, top-5 logits) to this file.
    #[arg(long = "trace-tokens", value_name = "FILE")]
    pub trace_tokens: Option<PathBuf>,

    /// Layers to offload to the GPU (accepted; this build runs on the CPU).
    #[arg(long = "n-gpu-layers", visible_alias = "gpu-layers")]
    pub n_gpu_layers: Option<i64>,

    /// Measure prompt processing and generation speed like llama-bench (-p and -n are then
    /// the prompt and generation sizes, default 512 and 128).
    #[arg(long = "bench")]
    pub bench: bool,

    /// With --bench: measured runs per test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub repetitions: usize,

    /// With --bench: output format, md or json.
    #[arg(short = 'o', long = "output", value_name = "md|json")]
    pub bench_output: Option<String>,

    /// Log model details and the chosen CPU kernels to stderr.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,

    /// Serve the chat page and the HTTP API (the default when no prompt is given).
    #[arg(long = "server")]
    pub server: bool,

    /// Run in the terminal even without a prompt (no server).
    #[arg(long = "cli")]
    pub cli: bool,

    /// Interactive conversation in the terminal with the model's chat template (-p: system prompt).
    #[arg(long = "chat", visible_alias = "conversation")]
    pub chat: bool,

    /// Server: address to listen on.
    #[arg(long = "host", default_value = "127.0.0.1")]
    pub host: String,

    /// Server: port to listen on (the next ones up to +10 are tried when it is taken; 0: any).
    #[arg(long = "port", default_value_t = 8080)]
    pub port: u16,

    /// Server: parallel sequences (slots); -c is split between them.
    #[arg(long = "parallel", default_value_t = 4)]
    pub parallel: usize,

    /// Server: require `Authorization: Bearer KEY` on API requests.
    #[arg(long = "api-key", value_name = "KEY")]
    pub api_key: Option<String>,

    /// Server: do not open the chat page in a browser.
    #[arg(long = "nobrowser", visible_alias = "no-browser")]
    pub nobrowser: bool,

    /// Server: the model name shown to clients (default: the model's file name).
    #[arg(short = 'a', long = "alias")]
    pub alias: Option<String>,

    /// Server: connection worker threads (also the most connections served at once).
    #[arg(long = "threads-http", default_value_t = 64)]
    pub threads_http: usize,
}

/// llama.cpp's multi-letter single-dash flags and the long flags they mean.
const SHORT_ALIASES: &[(&str, &str)] = &[
    ("-ngl", "--n-gpu-layers"),
    ("-ub", "--ubatch-size"),
    ("-np", "--parallel"),
    ("-cnv", "--chat"),
];

/// Rewrites llama.cpp-style multi-letter short flags to their long names.
pub fn normalize_args(args: Vec<OsString>) -> Vec<OsString> {
    args.into_iter()
        .map(|a| {
            match a
                .to_str()
                .and_then(|s| SHORT_ALIASES.iter().find(|(short, _)| *short == s))
            {
                Some((_, long)) => OsString::from(*long),
                None => a,
            }
        })
        .collect()
}

/// Parses argv (program name first). Errors come back as one line.
pub fn parse(args: Vec<OsString>) -> Result<Cli, CliError> {
    Cli::try_parse_from(normalize_args(args)).map_err(|e| match e.kind() {
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
            CliError::Info(e.to_string())
        }
        _ => CliError::Usage(
            e.render()
                .to_string()
                .lines()
                .next()
                .unwrap_or("bad arguments")
                .trim_start_matches("error: ")
                .to_string(),
        ),
    })
}

/// A command line that is not a run request.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// --help or --version: print and exit successfully.
    #[error("{0}")]
    Info(String),
    /// A malformed command line, in one line.
    #[error("{0}")]
    Usage(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn llama_cpp_flags() {
        let c = parse(args(&[
            "x", "-m", "a.gguf", "-p", "-hi", "-n", "5", "-ngl", "99", "-s", "3", "--temp", "0",
        ]))
        .unwrap();
        assert_eq!(c.model.as_deref(), Some("a.gguf"));
        assert_eq!(c.prompt.as_deref(), Some("-hi"));
        assert_eq!(
            (c.n_predict, c.n_gpu_layers, c.seed, c.temp),
            (5, Some(99), 3, 0.0)
        );
    }

    #[test]
    fn unknown_flag_is_one_line() {
        let e = parse(args(&["x", "--bogus"])).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("--bogus") && !msg.contains('\n'), "{msg}");
    }
}
