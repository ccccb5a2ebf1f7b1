//! The command line: one clap parser with llama.cpp's flag names, shared by every mode, then
//! validation into typed options. llama.cpp's multi-letter short flags (`-ngl`, `-np`, ...) are
//! rewritten to their long forms before clap sees them.
//!
//! Every flag of `llama-server --help` is accepted: the ones this program acts on are typed
//! fields here and in `compat`, `spec`, `server_flags`, `embedding_flags` and `gpu_flags`; the ones it accepts without effect,
//! or refuses because the feature is not built, are tables (`table`) grouped by concern
//! (`hardware`, `model_flags`, `server_flags`, `logging`, `sampling_flags`, `spec`). Their
//! `LLAMA_ARG_*` environment variables work too; the command line wins over a variable.

mod compat;
mod embedding_flags;
mod gpu_flags;
mod hardware;
mod logging;
mod lora_flags;
mod media_flags;
mod model_flags;
mod reasoning_flags;
mod rpc_flags;
mod sampling_flags;
mod sampling_params;
mod server_flags;
mod spec;
mod table;

pub use compat::CompatArgs;
pub use embedding_flags::EmbeddingArgs;
pub use gpu_flags::GpuArgs;
pub use lora_flags::LoraArgs;
pub use media_flags::MediaArgs;
pub use reasoning_flags::ReasoningArgs;
pub use rpc_flags::{Devices, RpcArgs};
pub use server_flags::{ServerArgs, DEFAULT_TIMEOUT_SECS};
pub use spec::SpecArgs;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser};
use std::ffi::OsString;
use std::path::PathBuf;

/// The tables of flags accepted without effect or refused, by concern.
const TABLES: &[&[table::Flag]] = &[
    hardware::FLAGS,
    model_flags::FLAGS,
    server_flags::FLAGS,
    logging::FLAGS,
    sampling_flags::FLAGS,
    spec::FLAGS,
];

/// Raw flags as typed by the user.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "llamafile",
    version,
    about = "Run a GGUF language model from one file",
    disable_help_subcommand = true,
    disable_help_flag = true,
    // As in llama.cpp, a later flag overrides an earlier one: the user's arguments override
    // the defaults from `.args` that come before them.
    args_override_self = true
)]
pub struct Cli {
    /// Print help.
    #[arg(short = 'h', long = "help", visible_alias = "usage", action = clap::ArgAction::Help)]
    help: Option<bool>,

    /// Print the devices blocks can be offloaded to (the --rpc workers' devices) and exit.
    #[arg(long = "list-devices")]
    pub list_devices: bool,

    /// Print a bash completion script for this program's flags and exit.
    #[arg(long = "completion-bash")]
    pub completion_bash: bool,

    /// Model: a GGUF file, a llamafile, or an entry of this executable's own ZIP.
    #[arg(
        short = 'm',
        long = "model",
        value_name = "FNAME",
        env = "LLAMA_ARG_MODEL"
    )]
    pub model: Option<String>,

    /// Prompt text.
    #[arg(short = 'p', long = "prompt", allow_hyphen_values = true)]
    pub prompt: Option<String>,

    /// Read the prompt from a file (one trailing newline is dropped).
    #[arg(short = 'f', long = "file", value_name = "FNAME")]
    pub file: Option<PathBuf>,

    /// Tokens to generate (-1: until end of generation or a full context).
    #[arg(short = 'n', long = "n-predict", visible_alias = "predict", default_value_t = -1, allow_negative_numbers = true, env = "LLAMA_ARG_N_PREDICT")]
    pub n_predict: i64,

    /// Context size in tokens (0: the model's training context).
    #[arg(
        short = 'c',
        long = "ctx-size",
        default_value_t = 4096,
        env = "LLAMA_ARG_CTX_SIZE"
    )]
    pub ctx_size: usize,

    /// Whether -c (or its variable) was given rather than defaulted.
    #[arg(skip)]
    pub ctx_size_given: bool,

    /// Logical batch size: most tokens fed to one forward pass.
    #[arg(
        short = 'b',
        long = "batch-size",
        default_value_t = 2048,
        env = "LLAMA_ARG_BATCH"
    )]
    pub batch_size: usize,

    /// Physical batch size: most tokens one forward pass computes (prompts are fed in chunks of
    /// the smaller of this and --batch-size).
    #[arg(long = "ubatch-size", default_value_t = 512, env = "LLAMA_ARG_UBATCH")]
    pub ubatch_size: usize,

    /// Compute threads (default, or -1: the physical cores this process may use).
    #[arg(
        short = 't',
        long = "threads",
        allow_negative_numbers = true,
        env = "LLAMA_ARG_THREADS"
    )]
    pub threads: Option<i64>,

    /// Random seed (-1: a random one).
    #[arg(short = 's', long = "seed", default_value_t = -1, allow_negative_numbers = true)]
    pub seed: i64,

    /// Temperature (0: greedy).
    #[arg(
        long = "temp",
        visible_alias = "temperature",
        default_value_t = 0.8,
        allow_negative_numbers = true,
        env = "LLAMA_ARG_TEMPERATURE"
    )]
    pub temp: f32,

    /// Top-k sampling (0: off).
    #[arg(long = "top-k", default_value_t = 40, env = "LLAMA_ARG_TOP_K")]
    pub top_k: i32,

    /// Top-p sampling (1.0: off).
    #[arg(long = "top-p", default_value_t = 0.95, env = "LLAMA_ARG_TOP_P")]
    pub top_p: f32,

    /// Min-p sampling (0.0: off).
    #[arg(long = "min-p", default_value_t = 0.05, env = "LLAMA_ARG_MIN_P")]
    pub min_p: f32,

    /// Repetition penalty (1.0: off).
    #[arg(
        long = "repeat-penalty",
        default_value_t = 1.0,
        env = "LLAMA_ARG_REPEAT_PENALTY"
    )]
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
        allow_negative_numbers = true,
        env = "LLAMA_ARG_PRESENCE_PENALTY"
    )]
    pub presence_penalty: f32,

    /// Frequency penalty: subtracted per occurrence of each recent token (0.0: off).
    #[arg(
        long = "frequency-penalty",
        default_value_t = 0.0,
        allow_negative_numbers = true,
        env = "LLAMA_ARG_FREQUENCY_PENALTY"
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
    #[arg(
        long = "dry-penalty-last-n",
        default_value_t = 64,
        allow_negative_numbers = true
    )]
    pub dry_penalty_last_n: i32,

    /// DRY sequence breaker (repeatable; replaces the defaults \n : \" *; "none": no breakers).
    #[arg(long = "dry-sequence-breaker", value_name = "STRING")]
    pub dry_sequence_breaker: Vec<String>,

    /// Top-n-sigma sampling (-1: off).
    #[arg(long = "top-n-sigma", visible_alias = "top-nsigma", default_value_t = -1.0, allow_negative_numbers = true)]
    pub top_n_sigma: f32,

    /// Locally typical sampling, parameter p (1.0: off).
    #[arg(long = "typical", visible_alias = "typical-p", default_value_t = 1.0)]
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

    /// Layers to offload to the GPU: a number, auto or all (accepted; this build runs on the CPU).
    #[arg(
        long = "n-gpu-layers",
        visible_alias = "gpu-layers",
        allow_negative_numbers = true,
        env = "LLAMA_ARG_N_GPU_LAYERS",
        value_parser = gpu_layers
    )]
    pub n_gpu_layers: Option<String>,

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
    #[arg(short = 'v', long = "verbose", visible_alias = "log-verbose")]
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

    /// Server: addresses to listen on, comma-separated.
    #[arg(long = "host", default_value = "127.0.0.1", env = "LLAMA_ARG_HOST")]
    pub host: String,

    /// Server: port to listen on (the next ones up to +10 are tried when it is taken; 0: any).
    #[arg(long = "port", default_value_t = 8080, env = "LLAMA_ARG_PORT")]
    pub port: u16,

    /// Server: parallel sequences (slots); -c is split between them (-1: 4).
    #[arg(
        long = "parallel",
        default_value_t = -1,
        allow_negative_numbers = true,
        env = "LLAMA_ARG_N_PARALLEL"
    )]
    pub parallel: i64,

    /// Server: require `Authorization: Bearer KEY` on API requests (several keys:
    /// comma-separated).
    #[arg(long = "api-key", value_name = "KEY", env = "LLAMA_API_KEY")]
    pub api_key: Option<String>,

    /// Server: do not open the chat page in a browser.
    #[arg(long = "nobrowser", visible_alias = "no-browser")]
    pub nobrowser: bool,

    /// Server: the model's names for clients, comma-separated; the first is shown (default:
    /// the model's file name), any is accepted as a request's `model`.
    #[arg(short = 'a', long = "alias", env = "LLAMA_ARG_ALIAS")]
    pub alias: Option<String>,

    /// Server: connection worker threads, also the most connections served at once (-1: 64).
    #[arg(
        long = "threads-http",
        default_value_t = -1,
        allow_negative_numbers = true,
        env = "LLAMA_ARG_THREADS_HTTP"
    )]
    pub threads_http: i64,

    /// Server: seconds a request head, and then its body, may take to arrive, and a write may
    /// stall on a client that stopped reading (llama-server's read/write timeout).
    #[arg(
        long = "timeout",
        value_name = "SECONDS",
        default_value_t = DEFAULT_TIMEOUT_SECS,
        value_parser = clap::value_parser!(u64).range(1..),
        env = "LLAMA_ARG_TIMEOUT"
    )]
    pub timeout: u64,

    /// When the context fills, drop the older half of the tokens after --keep and go on
    /// (keys of the rest are re-rotated for their new positions) instead of stopping
    /// (env LLAMA_ARG_CONTEXT_SHIFT).
    #[arg(long = "context-shift", overrides_with = "no_context_shift")]
    pub context_shift: bool,

    /// A full context ends generation (the default).
    #[arg(long = "no-context-shift", overrides_with = "context_shift")]
    pub no_context_shift: bool,

    /// Tokens of the prompt a context shift keeps (-1: the whole prompt; BOS is kept too).
    #[arg(long = "keep", default_value_t = 0, allow_negative_numbers = true)]
    pub keep: i64,

    /// Chat template: Jinja source, or the name of one of llama.cpp's built-in formats (bailing,
    /// bailing-think, bailing2, chatglm3, chatglm4, chatml, command-r, deepseek, deepseek-ocr,
    /// deepseek2, deepseek3, exaone-moe, exaone3, exaone4, falcon3, gemma, gigachat, glmedge,
    /// gpt-oss, granite, granite-4.0, granite-4.1, grok-2, hunyuan-dense, hunyuan-moe,
    /// hunyuan-vl, kimi-k2, llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip, llama3, llama4,
    /// megrez, minicpm, mistral-v1, mistral-v3, mistral-v3-tekken, mistral-v7, mistral-v7-tekken,
    /// monarch, openchat, orion, pangu-embedded, phi3, phi4, rwkv-world, seed_oss, smolvlm,
    /// solar-open, vicuna, vicuna-orca, yandex, zephyr); replaces the model's own.
    #[arg(
        long = "chat-template",
        value_name = "NAME|JINJA",
        env = "LLAMA_ARG_CHAT_TEMPLATE"
    )]
    pub chat_template: Option<String>,

    /// Chat template read from a Jinja file; replaces the model's own.
    #[arg(
        long = "chat-template-file",
        value_name = "FNAME",
        env = "LLAMA_ARG_CHAT_TEMPLATE_FILE"
    )]
    pub chat_template_file: Option<PathBuf>,

    #[command(flatten)]
    pub spec: SpecArgs,

    #[command(flatten)]
    pub srv: ServerArgs,

    #[command(flatten)]
    pub reasoning: ReasoningArgs,

    #[command(flatten)]
    pub compat: CompatArgs,

    #[command(flatten)]
    pub emb: EmbeddingArgs,

    #[command(flatten)]
    pub media: MediaArgs,

    #[command(flatten)]
    pub lora: LoraArgs,

    #[command(flatten)]
    pub rpc: RpcArgs,

    #[command(flatten)]
    pub gpu: GpuArgs,
}

impl Cli {
    /// Most tokens fed to one forward pass: llama.cpp splits a batch into micro-batches of
    /// `--ubatch-size`, and which attention path a pass takes depends on its length.
    pub fn forward_batch(&self) -> usize {
        self.ubatch_size.min(self.batch_size).max(1)
    }

    /// Compute threads asked for (`None`: not given, or -1 for automatic).
    pub fn thread_count(&self) -> Option<usize> {
        self.threads.filter(|&t| t > 0).map(|t| t as usize)
    }

    /// Server slots (`-np`; -1 or absent: 4). 0 is kept, to be refused by the server.
    pub fn slot_count(&self) -> usize {
        if self.parallel < 0 {
            4
        } else {
            self.parallel as usize
        }
    }

    /// Server connection workers (`--threads-http`; -1: 64).
    pub fn http_workers(&self) -> usize {
        if self.threads_http <= 0 {
            64
        } else {
            self.threads_http as usize
        }
    }

    /// The model's aliases from `--alias`, in order.
    pub fn aliases(&self) -> Vec<String> {
        split_list(self.alias.as_deref())
    }

    /// Settles what clap leaves open: switch pairs with their variables, refusals, values
    /// checked together.
    fn settle(&mut self, m: &ArgMatches) -> Result<(), String> {
        table::check(m, TABLES)?;
        self.compat.check()?;
        self.srv.resolve(m)?;
        self.emb.resolve(m)?;
        self.media.resolve(m)?;
        self.lora.resolve(m)?;
        self.spec.resolve(m)?;
        self.reasoning.resolve(m)?;
        self.context_shift = table::pair(
            m,
            "context_shift",
            "no_context_shift",
            "LLAMA_ARG_CONTEXT_SHIFT",
            false,
        )?;
        // The raw pair agrees with the outcome, whichever way (flag or variable) it was reached.
        self.no_context_shift = !self.context_shift;
        self.ctx_size_given = m.value_source("ctx_size") != Some(ValueSource::DefaultValue);
        // As in llama.cpp, the later of flags that set the same thing wins.
        match latest(m, &["samplers", "sampling_seq"]) {
            Some("samplers") => self.sampling_seq = None,
            Some(_) => self.samplers = None,
            None => {}
        }
        let grammar = ["grammar", "grammar_file", "json_schema", "json_schema_file"];
        if let Some(keep) = latest(m, &grammar) {
            if keep != "grammar" {
                self.grammar = None;
            }
            if keep != "grammar_file" {
                self.grammar_file = None;
            }
            if keep != "json_schema" {
                self.json_schema = None;
            }
            if keep != "json_schema_file" {
                self.json_schema_file = None;
            }
        }
        match latest(m, &["chat_template", "chat_template_file"]) {
            Some("chat_template") => self.chat_template_file = None,
            Some(_) => self.chat_template = None,
            None => {}
        }
        if self.threads.is_some_and(|t| t == 0 || t < -1) {
            return Err("--threads must be positive, or -1 for the physical cores".to_string());
        }
        if self.alias.is_some() && self.aliases().is_empty() {
            return Err("--alias: give at least one name".to_string());
        }
        Ok(())
    }
}

/// Of the arguments `ids`, the one given last on the command line (or, failing that, by a
/// variable), if any was given.
fn latest<'a>(m: &ArgMatches, ids: &[&'a str]) -> Option<&'a str> {
    ids.iter()
        .filter(|id| {
            m.value_source(id)
                .is_some_and(|s| s != ValueSource::DefaultValue)
        })
        .max_by_key(|id| m.index_of(id).unwrap_or(0))
        .copied()
}

/// The items of a comma-separated list, trimmed, empty ones dropped.
pub fn split_list(list: Option<&str>) -> Vec<String> {
    list.unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// `-ngl`: a number of layers, `auto` or `all`.
fn gpu_layers(v: &str) -> Result<String, String> {
    if v == "auto" || v == "all" || v.parse::<i64>().is_ok() {
        Ok(v.to_string())
    } else {
        Err("expected a number of layers, auto or all".to_string())
    }
}

/// llama.cpp's multi-letter single-dash flags and the long flags they mean.
const SHORT_ALIASES: &[(&str, &str)] = &[
    ("-ngl", "--n-gpu-layers"),
    ("-ts", "--tensor-split"),
    ("-mg", "--main-gpu"),
    ("-ub", "--ubatch-size"),
    ("-np", "--parallel"),
    ("-cnv", "--chat"),
    ("-jf", "--json-schema-file"),
    ("-md", "--model-draft"),
    ("-lcs", "--lookup-cache-static"),
    ("-lcd", "--lookup-cache-dynamic"),
    ("-pg", "--n-gen-prompt"),
    ("-to", "--timeout"),
    ("-rea", "--reasoning"),
    ("-mm", "--mmproj"),
];

/// The whole parser: the typed flags and the tables.
pub fn command() -> clap::Command {
    table::add_args(Cli::command(), TABLES)
}

/// The long flag a llama.cpp multi-letter short flag stands for.
fn long_of(short: &str) -> Option<String> {
    SHORT_ALIASES
        .iter()
        .chain(compat::SHORT_ALIASES)
        .find(|(s, _)| *s == short)
        .map(|(_, long)| long.to_string())
        .or_else(|| {
            TABLES
                .iter()
                .flat_map(|t| t.iter())
                .flat_map(|f| f.multi_letter())
                .find(|(s, _)| *s == short)
                .map(|(_, long)| format!("--{long}"))
        })
}

/// The spellings (`--long`, `--alias`, `-c`) of every flag that always takes a value: what
/// follows one is a value, never a flag to rewrite.
fn value_taking(cmd: &clap::Command) -> std::collections::HashSet<String> {
    let mut out = std::collections::HashSet::new();
    for a in cmd.get_arguments() {
        let takes =
            a.get_num_args().is_some_and(|n| n.min_values() > 0) && a.get_action().takes_values();
        if !takes {
            continue;
        }
        for l in a.get_long_and_visible_aliases().into_iter().flatten() {
            out.insert(format!("--{l}"));
        }
        if let Some(c) = a.get_short() {
            out.insert(format!("-{c}"));
        }
    }
    out
}

/// Rewrites llama.cpp-style multi-letter short flags to their long names, and `-r` to
/// `--reverse-prompt` unless `--bench` is given (where it is llama-bench's repetitions).
pub fn normalize_args(args: Vec<OsString>) -> Vec<OsString> {
    let mut cmd = command();
    cmd.build();
    normalize_with(&cmd, args)
}

/// [`normalize_args`] against an already built command.
fn normalize_with(cmd: &clap::Command, args: Vec<OsString>) -> Vec<OsString> {
    let bench = args.iter().any(|a| a == "--bench");
    let valued = value_taking(cmd);
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
        let long = long_of(s).or((s == "-r" && !bench).then(|| "--reverse-prompt".to_string()));
        value_next = valued.contains(long.as_deref().unwrap_or(s));
        out.push(long.map_or(a, OsString::from));
    }
    out
}

/// Parses argv (program name first). Errors come back as one line.
pub fn parse(args: Vec<OsString>) -> Result<Cli, CliError> {
    // One command serves both the rewriting and the parsing (building it is not free).
    let mut cmd = command();
    cmd.build();
    let args = normalize_with(&cmd, args);
    let m = cmd.try_get_matches_from_mut(args).map_err(clap_error)?;
    let mut cli = Cli::from_arg_matches(&m).map_err(clap_error)?;
    cli.settle(&m).map_err(CliError::Usage)?;
    if cli.completion_bash {
        return Err(CliError::Info(completion_bash()));
    }
    Ok(cli)
}

fn clap_error(e: clap::Error) -> CliError {
    match e.kind() {
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
    }
}

/// A bash completion script offering every flag spelling, files for everything else.
fn completion_bash() -> String {
    let cmd = command();
    let mut words: Vec<String> = Vec::new();
    for a in cmd.get_arguments() {
        for l in a.get_long_and_visible_aliases().into_iter().flatten() {
            words.push(format!("--{l}"));
        }
        if let Some(c) = a.get_short() {
            words.push(format!("-{c}"));
        }
    }
    words.extend(SHORT_ALIASES.iter().map(|(s, _)| s.to_string()));
    words.extend(compat::SHORT_ALIASES.iter().map(|(s, _)| s.to_string()));
    for f in TABLES.iter().flat_map(|t| t.iter()) {
        words.extend(f.multi_letter().map(|(s, _)| s.to_string()));
    }
    words.sort();
    words.dedup();
    format!(
        "_llamafile_complete() {{\n    local cur=\"${{COMP_WORDS[COMP_CWORD]}}\"\n    if [[ \"$cur\" == -* ]]; then\n        COMPREPLY=( $(compgen -W \"{}\" -- \"$cur\") )\n    fi\n}}\ncomplete -o default -F _llamafile_complete llamafile\n",
        words.join(" ")
    )
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
            (5, Some("99".to_string()), 3, 0.0)
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
    fn the_parser_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn llama_server_habits() {
        let c = parse(args(&[
            "x",
            "-np",
            "-1",
            "-t",
            "-1",
            "--threads-http",
            "-1",
            "-ngl",
            "all",
            "--no-slots",
            "-a",
            "gpt-4o-mini,local",
            "-nkvo",
            "-fit",
            "--jinja",
            "-C",
            "ff",
        ]))
        .unwrap();
        assert_eq!(
            (c.slot_count(), c.thread_count(), c.http_workers()),
            (4, None, 64)
        );
        assert_eq!(c.aliases(), ["gpt-4o-mini", "local"]);
        assert!(!c.srv.switches.slots && c.srv.switches.webui);
        // A value that looks like a multi-letter flag is left alone.
        let c = parse(args(&["x", "-p", "-np"])).unwrap();
        assert_eq!(c.prompt.as_deref(), Some("-np"));
        for (argv, needle) in [
            (
                &["x", "--control-vector", "a.gguf"][..],
                "--control-vector: this build does not support control vectors",
            ),
            (
                &["x", "-hf", "u/m"],
                "--hf-repo: this build does not support downloading",
            ),
            (
                &["x", "--rope-scale", "2"],
                "--rope-scale 2: this build does not support RoPE",
            ),
            (&["x", "--cpu-strict", "2"], "--cpu-strict"),
            (&["x", "-np", "-1", "--threads", "0"], "--threads"),
        ] {
            let msg = parse(args(argv)).unwrap_err().to_string();
            assert!(msg.contains(needle) && !msg.contains('\n'), "{msg}");
        }
        assert!(parse(args(&["x", "--rope-scale", "1.0"])).is_ok());
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
            (
                &["x", "-ctv", "q4_0", "-fa", "off"][..],
                "--cache-type-v q4_0",
            ),
            (&["x", "-fa", "sometimes"], "--flash-attn sometimes"),
        ] {
            let msg = parse(args(argv)).unwrap_err().to_string();
            assert!(msg.contains(needle), "{msg}");
        }
    }
}
