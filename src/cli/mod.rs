//! The command line: one clap parser with llama.cpp's flag names, shared by every mode, then
//! validation into typed options. llama.cpp's multi-letter short flags (`-ngl`, `-np`, ...) are
//! rewritten to their long forms before clap sees them.

mod compat;
mod spec;

pub use compat::CompatArgs;
pub use spec::SpecArgs;

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

    /// Physical batch size: most tokens one forward pass computes (prompts are fed in chunks of
    /// the smaller of this and --batch-size).
    #[arg(long = "ubatch-size", default_value_t = 512)]
    pub ubatch_size: usize,

    /// Compute threads (default: the physical cores this process may use).
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

    /// Presence penalty: subtracted once from the logit of every recent token (0.0: off).
    #[arg(
        long = "presence-penalty",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub presence_penalty: f32,

    /// Frequency penalty: subtracted per occurrence of each recent token (0.0: off).
    #[arg(
        long = "frequency-penalty",
        default_value_t = 0.0,
        allow_negative_numbers = true
    )]
    pub frequency_penalty: f32,

    /// DRY multiplier (0.0: off).
    #[arg(long = "dry-multiplier", default_value_t = 0.0)]
    pub dry_multiplier: f32,

    /// DRY base.
    #[arg(long = "dry-base", default_value_t = 1.75)]
    pub dry_base: f32,

    /// DRY: repeats longer than this are penalised.
    #[arg(long = "dry-allowed-length", default_value_t = 2)]
    pub dry_allowed_length: usize,

    /// DRY: tokens looked back over (0: off, -1: the whole context).
    #[arg(long = "dry-penalty-last-n", default_value_t = -1, allow_negative_numbers = true)]
    pub dry_penalty_last_n: i32,

    /// DRY sequence breaker (repeatable; replaces the defaults \n : \" *; "none": no breakers).
    #[arg(long = "dry-sequence-breaker", value_name = "STRING")]
    pub dry_sequence_breaker: Vec<String>,

    /// Top-n-sigma sampling (-1: off).
    #[arg(long = "top-n-sigma", default_value_t = -1.0, allow_negative_numbers = true)]
    pub top_n_sigma: f32,

    /// Locally typical sampling, parameter p (1.0: off).
    #[arg(long = "typical", default_value_t = 1.0)]
    pub typical: f32,

    /// XTC probability (0.0: off).
    #[arg(long = "xtc-probability", default_value_t = 0.0)]
    pub xtc_probability: f32,

    /// XTC threshold (above 0.5: off).
    #[arg(long = "xtc-threshold", default_value_t = 0.1)]
    pub xtc_threshold: f32,

    /// Dynamic temperature range (0.0: off).
    #[arg(long = "dynatemp-range", default_value_t = 0.0)]
    pub dynatemp_range: f32,

    /// Dynamic temperature exponent.
    #[arg(long = "dynatemp-exp", default_value_t = 1.0)]
    pub dynatemp_exp: f32,

    /// Mirostat sampling (0: off, 1: Mirostat, 2: Mirostat 2.0).
    #[arg(long = "mirostat", default_value_t = 0)]
    pub mirostat: u8,

    /// Mirostat learning rate, eta.
    #[arg(long = "mirostat-lr", default_value_t = 0.1)]
    pub mirostat_lr: f32,

    /// Mirostat target entropy, tau.
    #[arg(long = "mirostat-ent", default_value_t = 5.0)]
    pub mirostat_ent: f32,

    /// Samplers in order, separated by ';' (default penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature).
    #[arg(long = "samplers", value_name = "LIST")]
    pub samplers: Option<String>,

    /// Samplers in order as letters (default edskypmxt).
    #[arg(
        long = "sampling-seq",
        visible_alias = "sampler-seq",
        value_name = "LETTERS"
    )]
    pub sampling_seq: Option<String>,

    /// Bias a token's logit: TOKEN_ID(+|-)BIAS, e.g. 15043+1 or 15043-inf (repeatable).
    #[arg(
        short = 'l',
        long = "logit-bias",
        value_name = "TOKEN_ID(+/-)BIAS",
        allow_hyphen_values = true
    )]
    pub logit_bias: Vec<String>,

    /// Constrain output with a GBNF grammar.
    #[arg(long = "grammar", value_name = "GRAMMAR")]
    pub grammar: Option<String>,

    /// Constrain output with a GBNF grammar read from a file.
    #[arg(long = "grammar-file", value_name = "FNAME")]
    pub grammar_file: Option<PathBuf>,

    /// Constrain output to JSON matching this JSON schema ('{}' for any JSON object).
    #[arg(short = 'j', long = "json-schema", value_name = "SCHEMA")]
    pub json_schema: Option<String>,

    /// Constrain output to JSON matching the JSON schema in this file.
    #[arg(long = "json-schema-file", value_name = "FNAME")]
    pub json_schema_file: Option<PathBuf>,

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

    /// Write OUT: this engine with the weights and .args of the llamafile OLD, copied as
    /// stored (refused when this engine cannot run OLD's model).
    #[arg(long = "upgrade-engine", num_args = 2, value_names = ["OLD", "OUT"])]
    pub upgrade_engine: Option<Vec<PathBuf>>,

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

    /// --bench: tokens already in the cache before each test (llama-bench's `-d`;
    /// comma-separated depths, default 0).
    #[arg(short = 'd', long = "n-depth", value_name = "N[,N...]")]
    pub bench_depth: Option<String>,

    /// --bench: prompt-then-generation tests `PP,TG` (llama-bench's `-pg`; repeatable).
    #[arg(long = "n-gen-prompt", value_name = "PP,TG")]
    pub bench_pg: Vec<String>,

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

    /// Server: seconds a request head, and then its body, may take to arrive, and a write may
    /// stall on a client that stopped reading (llama-server's read/write timeout).
    #[arg(
        long = "timeout",
        value_name = "SECONDS",
        default_value_t = crate::server::http::DEFAULT_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub timeout: u64,

    /// When the context fills, drop the older half of the tokens after --keep and go on
    /// (keys of the rest are re-rotated for their new positions) instead of stopping.
    #[arg(long = "context-shift", overrides_with = "no_context_shift")]
    pub context_shift: bool,

    /// A full context ends generation (the default).
    #[arg(long = "no-context-shift", overrides_with = "context_shift")]
    pub no_context_shift: bool,

    /// Tokens of the prompt a context shift keeps (-1: the whole prompt; BOS is kept too).
    #[arg(long = "keep", default_value_t = 0, allow_negative_numbers = true)]
    pub keep: i64,

    /// Chat template: a built-in format name (chatml, llama2, llama3, gemma, phi3, zephyr,
    /// vicuna, deepseek, mistral-v7) or Jinja source; replaces the model's own.
    #[arg(long = "chat-template", value_name = "NAME|JINJA")]
    pub chat_template: Option<String>,

    /// Chat template read from a Jinja file; replaces the model's own.
    #[arg(long = "chat-template-file", value_name = "FNAME")]
    pub chat_template_file: Option<PathBuf>,

    /// Accepted for llama.cpp compatibility: templates always run as Jinja here.
    #[arg(long = "jinja")]
    pub jinja: bool,

    #[command(flatten)]
    pub spec: SpecArgs,

    #[command(flatten)]
    pub compat: CompatArgs,
}

impl Cli {
    /// Most tokens fed to one forward pass: llama.cpp splits a batch into micro-batches of
    /// `--ubatch-size`, and which attention path a pass takes depends on its length.
    pub fn forward_batch(&self) -> usize {
        self.ubatch_size.min(self.batch_size).max(1)
    }
}

/// llama.cpp's multi-letter single-dash flags and the long flags they mean.
const SHORT_ALIASES: &[(&str, &str)] = &[
    ("-ngl", "--n-gpu-layers"),
    ("-ub", "--ubatch-size"),
    ("-np", "--parallel"),
    ("-cnv", "--chat"),
    ("-jf", "--json-schema-file"),
    ("-md", "--model-draft"),
    ("-pg", "--n-gen-prompt"),
    ("-to", "--timeout"),
];

/// Flags whose value is free text, which is never taken for a flag to rewrite.
const TEXT_VALUED: &[&str] = &[
    "-p",
    "--prompt",
    "-sys",
    "--system-prompt",
    "-r",
    "--reverse-prompt",
    "--in-stop",
    "--chat-template",
    "--grammar",
    "-j",
    "--json-schema",
    "-a",
    "--alias",
    "--api-key",
    "--dry-sequence-breaker",
];

/// Rewrites llama.cpp-style multi-letter short flags to their long names, and `-r` to
/// `--reverse-prompt` unless `--bench` is given (where it is llama-bench's repetitions).
pub fn normalize_args(args: Vec<OsString>) -> Vec<OsString> {
    let bench = args.iter().any(|a| a == "--bench");
    let mut out = Vec::with_capacity(args.len());
    let mut value_next = false;
    for a in args {
        if value_next {
            value_next = false;
            out.push(a);
            continue;
        }
        let Some(s) = a.to_str() else {
            out.push(a);
            continue;
        };
        let long = SHORT_ALIASES
            .iter()
            .chain(compat::SHORT_ALIASES)
            .find(|(short, _)| *short == s)
            .map(|(_, long)| *long)
            .or((s == "-r" && !bench).then_some("--reverse-prompt"));
        value_next = TEXT_VALUED.contains(&long.unwrap_or(s));
        out.push(long.map_or(a, OsString::from));
    }
    out
}

/// Parses argv (program name first). Errors come back as one line.
pub fn parse(args: Vec<OsString>) -> Result<Cli, CliError> {
    let cli = parse_flags(args)?;
    cli.compat.check().map_err(CliError::Usage)?;
    Ok(cli)
}

fn parse_flags(args: Vec<OsString>) -> Result<Cli, CliError> {
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
    fn server_timeout() {
        assert_eq!(parse(args(&["x"])).unwrap().timeout, 10);
        assert_eq!(parse(args(&["x", "-to", "600"])).unwrap().timeout, 600);
        let msg = parse(args(&["x", "--timeout", "0"]))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("--timeout") && !msg.contains('\n'), "{msg}");
    }

    #[test]
    fn unknown_flag_is_one_line() {
        let e = parse(args(&["x", "--bogus"])).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("--bogus") && !msg.contains('\n'), "{msg}");
    }

    #[test]
    fn llama_cpp_compat_flags_parse() {
        let c = parse(args(&[
            "x",
            "-fa",
            "-ctk",
            "f16",
            "-tb",
            "4",
            "-sys",
            "-be brief",
            "-sp",
            "--no-warmup",
            "--mlock",
            "-no-cnv",
            "-r",
            "User:",
            "--ignore-eos",
            "-cb",
            "-lv",
            "1",
        ]))
        .unwrap();
        let k = &c.compat;
        assert_eq!(k.flash_attn.as_deref(), Some("on"));
        assert_eq!(k.system_prompt.as_deref(), Some("-be brief"));
        assert_eq!(k.reverse_prompt, vec!["User:".to_string()]);
        assert!(k.special && k.ignore_eos && k.no_warmup && k.mlock && k.no_conversation);
        assert_eq!((k.threads_batch, k.log_verbosity), (Some(4), Some(1)));
        // `-r` is llama-bench's repetitions under --bench, and text values are left alone.
        let c = parse(args(&["x", "--bench", "-r", "3", "-p", "-fa"])).unwrap();
        assert_eq!((c.repetitions, c.prompt.as_deref()), (3, Some("-fa")));
    }

    #[test]
    fn compat_values_we_cannot_honour_are_refused() {
        for (argv, needle) in [
            (&["x", "-ctv", "q4_0"][..], "--cache-type-v q4_0"),
            (&["x", "-fa", "sometimes"], "--flash-attn sometimes"),
        ] {
            let msg = parse(args(argv)).unwrap_err().to_string();
            assert!(msg.contains(needle), "{msg}");
        }
    }
}
