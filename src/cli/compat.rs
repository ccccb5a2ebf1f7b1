//! llama.cpp flags that scripts and habits carry over. Some act here (`--ignore-eos`,
//! `--reverse-prompt`, `-sys`, `-sp`, `--no-webui`, `--mlock`); the rest name things this engine always does or never
//! needs (flash attention, continuous batching, warm-up, logging, NUMA, mlock, ...) and are
//! accepted so that a llama.cpp command line runs unchanged. Values that would ask for
//! something this engine cannot do (a quantized KV cache) are refused by [`CompatArgs::check`].

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

    /// Flash attention: on, off or auto. Attention here is always the fused kind.
    #[arg(long = "flash-attn", num_args = 0..=1, default_missing_value = "on", value_name = "on|off|auto")]
    pub flash_attn: Option<String>,

    /// KV cache type for keys; only f16 is supported.
    #[arg(long = "cache-type-k", value_name = "TYPE")]
    pub cache_type_k: Option<String>,

    /// KV cache type for values; only f16 is supported.
    #[arg(long = "cache-type-v", value_name = "TYPE")]
    pub cache_type_v: Option<String>,

    /// Threads for batches: one pool (-t) serves both here.
    #[arg(long = "threads-batch", value_name = "N")]
    pub threads_batch: Option<usize>,

    /// Lock the mapped weights in RAM (mlock), as llama.cpp does; a warning if not allowed.
    #[arg(long = "mlock")]
    pub mlock: bool,

    /// Accepted; no effect here (weights are always mapped in place).
    #[arg(long = "no-mmap")]
    pub no_mmap: bool,

    /// Accepted; no effect here (there is no warm-up run).
    #[arg(long = "no-warmup")]
    pub no_warmup: bool,

    /// Accepted; no effect here.
    #[arg(long = "log-disable")]
    pub log_disable: bool,

    /// Accepted; no effect here.
    #[arg(
        long = "log-verbosity",
        value_name = "N",
        allow_negative_numbers = true
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

    /// Accepted; the server always batches continuously.
    #[arg(long = "cont-batching")]
    pub cont_batching: bool,

    /// Accepted; /metrics is always served.
    #[arg(long = "metrics")]
    pub metrics: bool,

    /// Accepted; /slots is always served.
    #[arg(long = "slots")]
    pub slots: bool,

    /// Accepted; /props is always served.
    #[arg(long = "props")]
    pub props: bool,

    /// Serve the chat page (the default).
    #[arg(long = "webui", overrides_with = "no_webui")]
    pub webui: bool,

    /// Serve the API only: `GET /` answers 404 and no browser is opened.
    #[arg(long = "no-webui", overrides_with = "webui")]
    pub no_webui: bool,

    /// Accepted; no effect here.
    #[arg(long = "cache-reuse", value_name = "N")]
    pub cache_reuse: Option<usize>,

    /// Accepted; no effect here.
    #[arg(long = "numa", value_name = "TYPE")]
    pub numa: Option<String>,

    /// Accepted; no effect here.
    #[arg(long = "prio", value_name = "N", allow_negative_numbers = true)]
    pub prio: Option<i32>,

    /// Accepted; everything runs on the CPU here.
    #[arg(long = "device", value_name = "LIST")]
    pub device: Option<String>,
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
    ("-cb", "--cont-batching"),
    ("-dev", "--device"),
    ("-no-cnv", "--no-conversation"),
];

impl CompatArgs {
    /// Refuses values this engine cannot honour, naming the flag.
    pub fn check(&self) -> Result<(), String> {
        for (flag, ty) in [
            ("--cache-type-k", &self.cache_type_k),
            ("--cache-type-v", &self.cache_type_v),
        ] {
            if let Some(t) = ty {
                if t != "f16" {
                    return Err(format!("{flag} {t}: only an f16 KV cache is supported"));
                }
            }
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
