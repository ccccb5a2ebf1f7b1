//! llama.cpp flags that scripts and habits carry over (llama-cli's, mostly). Some act here
//! (`--ignore-eos`, `--reverse-prompt`, `-sys`, `-sp`, `--mlock`, `-lm mlock`); the rest name things this engine always does or never
//! needs (flash attention, continuous batching, warm-up, logging, NUMA, mlock, ...) and are
//! accepted so that a llama.cpp command line runs unchanged. `-ctk`/`-ctv` pick the KV cache's
//! storage types ([`CompatArgs::kv_types`]); values this engine cannot honour (a quantized V
//! cache with `-fa off`, as llama.cpp refuses it) are refused by [`CompatArgs::check`].

use crate::backend::{KvType, KvTypes};
use clap::Args;

/// Flags taken from llama.cpp for compatibility.
#[derive(Args, Debug, Clone, Default)]
pub struct CompatArgs {
    /// Keep generating past end-of-generation tokens (they are never sampled).
    #[arg(long = "ignore-eos")]
    pub ignore_eos: bool,

    /// Stop once this text appears in the output (repeatable; `-r` outside --bench).
    #[arg(
        long = "reverse-prompt",
        visible_alias = "in-stop",
        value_name = "TEXT",
        allow_hyphen_values = true
    )]
    pub reverse_prompt: Vec<String>,

    /// System prompt for --chat (default: -p / -f).
    #[arg(
        long = "system-prompt",
        value_name = "TEXT",
        allow_hyphen_values = true
    )]
    pub system_prompt: Option<String>,

    /// Print special tokens (`<|im_end|>`, ...) in the output instead of hiding them.
    #[arg(long = "special")]
    pub special: bool,

    /// Flash attention: on, off or auto. Attention here is always the fused kind; off only
    /// refuses a quantized V cache, as llama.cpp does.
    #[arg(long = "flash-attn", num_args = 0..=1, default_missing_value = "on", value_name = "on|off|auto", env = "LLAMA_ARG_FLASH_ATTN")]
    pub flash_attn: Option<String>,

    /// KV cache type for keys: f32, f16 (default), bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1.
    #[arg(long = "cache-type-k", value_name = "TYPE", env = "LLAMA_ARG_CACHE_TYPE_K", value_parser = KV_TYPES)]
    pub cache_type_k: Option<String>,

    /// KV cache type for values (the same types; quantized ones need flash attention).
    #[arg(long = "cache-type-v", value_name = "TYPE", env = "LLAMA_ARG_CACHE_TYPE_V", value_parser = KV_TYPES)]
    pub cache_type_v: Option<String>,

    /// Threads for batches: one pool (-t) serves both here.
    #[arg(long = "threads-batch", value_name = "N")]
    pub threads_batch: Option<usize>,

    /// Lock the mapped weights in RAM (mlock), as llama.cpp does; a warning if not allowed.
    #[arg(long = "mlock")]
    pub mlock: bool,

    /// How weights are loaded: auto and mmap map the file in place; none, dio and mlock read
    /// the weights into memory of the process's own, as --no-mmap does; mlock and mmap+mlock
    /// lock them in RAM as --mlock does.
    #[arg(
        long = "load-mode",
        value_name = "MODE",
        env = "LLAMA_ARG_LOAD_MODE",
        value_parser = ["auto", "none", "mmap", "mlock", "mmap+mlock", "dio"]
    )]
    pub load_mode: Option<String>,

    /// Read the weights into memory of the process's own (huge pages where the system has
    /// them) instead of mapping the file: slower to start, and on file systems whose page cache
    /// has no large pages, faster to generate.
    #[arg(long = "no-mmap")]
    pub no_mmap: bool,

    /// Accepted; no effect here (there is no warm-up run).
    #[arg(long = "no-warmup")]
    pub no_warmup: bool,

    /// Accepted; no effect here.
    #[arg(long = "log-disable")]
    pub log_disable: bool,

    /// Accepted; no effect here (the log is a few lines; -v shows more).
    #[arg(
        long = "log-verbosity",
        visible_alias = "verbosity",
        value_name = "N",
        allow_negative_numbers = true,
        env = "LLAMA_ARG_LOG_VERBOSITY"
    )]
    pub log_verbosity: Option<i32>,

    /// Accepted; no effect here.
    #[arg(long = "color", num_args = 0..=1, default_missing_value = "on", value_name = "on|off|auto")]
    pub color: Option<String>,

    /// Accepted; no effect here.
    #[arg(long = "simple-io")]
    pub simple_io: bool,

    /// Accepted; no effect here (the prompt is never echoed).
    #[arg(long = "no-display-prompt")]
    pub no_display_prompt: bool,

    /// Accepted; no effect here.
    #[arg(long = "verbose-prompt")]
    pub verbose_prompt: bool,

    /// Accepted; without --chat there is no conversation mode to leave.
    #[arg(long = "no-conversation")]
    pub no_conversation: bool,

    /// Serve llama-server's Prometheus metrics at /metrics (501 without it).
    #[arg(
        long = "metrics",
        env = "LLAMA_ARG_ENDPOINT_METRICS",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub metrics: bool,

    /// Allow POST /props (GET /props is always served).
    #[arg(
        long = "props",
        env = "LLAMA_ARG_ENDPOINT_PROPS",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub props: bool,

    /// Accepted; no effect here (a request reuses the longest cached prefix of a slot; no
    /// chunks are shifted).
    #[arg(long = "cache-reuse", value_name = "N", env = "LLAMA_ARG_CACHE_REUSE")]
    pub cache_reuse: Option<usize>,

    /// Accepted; no effect here (threads are not placed by NUMA node).
    #[arg(
        long = "numa",
        value_name = "TYPE",
        env = "LLAMA_ARG_NUMA",
        value_parser = ["distribute", "isolate", "numactl"]
    )]
    pub numa: Option<String>,

    /// Accepted; no effect here.
    #[arg(long = "prio", value_name = "N", allow_negative_numbers = true)]
    pub prio: Option<i32>,
}

/// llama.cpp's multi-letter single-dash flags of this group and the long flags they mean.
pub const SHORT_ALIASES: &[(&str, &str)] = &[
    ("-fa", "--flash-attn"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-tb", "--threads-batch"),
    ("-sys", "--system-prompt"),
    ("-sp", "--special"),
    ("-lv", "--log-verbosity"),
    ("-co", "--color"),
    ("-dev", "--device"),
    ("-no-cnv", "--no-conversation"),
    ("-lm", "--load-mode"),
];

/// The KV cache types llama.cpp knows (`KvType`'s names).
const KV_TYPES: [&str; 9] = [
    "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1",
];

impl CompatArgs {
    /// Whether the weights are to be locked in RAM (`--mlock`, `-lm mlock`).
    pub fn lock_weights(&self) -> bool {
        self.mlock || matches!(self.load_mode.as_deref(), Some("mlock" | "mmap+mlock"))
    }

    /// Whether the weights are read into memory instead of mapped (`--no-mmap`, `-lm none`,
    /// `-lm dio`, `-lm mlock`: llama.cpp's modes without mmap).
    pub fn weights_in_memory(&self) -> bool {
        self.no_mmap || matches!(self.load_mode.as_deref(), Some("none" | "dio" | "mlock"))
    }

    /// The KV cache's storage types (`-ctk`, `-ctv`; f16 when absent).
    pub fn kv_types(&self) -> KvTypes {
        let ty = |v: &Option<String>| v.as_deref().and_then(KvType::parse).unwrap_or_default();
        KvTypes {
            k: ty(&self.cache_type_k),
            v: ty(&self.cache_type_v),
        }
    }

    /// Refuses values this engine cannot honour, naming the flag.
    pub fn check(&self) -> Result<(), String> {
        let v = self.kv_types().v;
        let fa_off = matches!(self.flash_attn.as_deref(), Some("off" | "0"));
        if v.is_quantized() && fa_off {
            return Err(format!(
                "--cache-type-v {v}: quantized V cache requires flash_attn to be enabled (--flash-attn off was given)"
            ));
        }
        // llama-bench spells these 0 and 1.
        for (flag, v) in [("--flash-attn", &self.flash_attn), ("--color", &self.color)] {
            if let Some(v) = v {
                if !["on", "off", "auto", "0", "1"].contains(&v.as_str()) {
                    return Err(format!("{flag} {v}: expected on, off or auto"));
                }
            }
        }
        Ok(())
    }
}
