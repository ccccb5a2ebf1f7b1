//! llama-server's flags: the ones this server acts on ([`ServerArgs`]: API keys from a file,
//! model tags, the endpoint switches, CORS, an API prefix, per-slot context, static files,
//! slot files) and, in
//! [`FLAGS`], the ones it accepts without effect or refuses (TLS, the multi-model router,
//! agent tools, prompt-cache tuning, ...). The older server
//! flags (`--host`, `--port`, `-np`, `--api-key`, `--alias`, `-to`, ...) are fields of
//! [`super::Cli`].

use super::table::{pair, switch, valued, Check, Effect, Flag};
use clap::{ArgMatches, Args};

/// `-to/--timeout`'s default, in seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 10;

/// Server flags this program acts on.
#[derive(Args, Debug, Clone, Default)]
pub struct ServerArgs {
    /// File of API keys, one a line (lines starting with # are comments); adds to --api-key.
    #[arg(
        long = "api-key-file",
        value_name = "FNAME",
        env = "LLAMA_ARG_API_KEY_FILE"
    )]
    pub api_key_file: Option<std::path::PathBuf>,

    /// Model tags, comma-separated (shown in /v1/models and /props; informational).
    #[arg(long = "tags", value_name = "STRING", env = "LLAMA_ARG_TAGS")]
    pub tags: Option<String>,

    /// Serve GET /slots (the default).
    #[arg(long = "slots", overrides_with = "no_slots")]
    pub slots: bool,

    /// GET /slots answers 501 (env LLAMA_ARG_ENDPOINT_SLOTS=0 too).
    #[arg(long = "no-slots", overrides_with = "slots")]
    pub no_slots: bool,

    /// Serve the chat page (the default).
    #[arg(long = "webui", visible_alias = "ui", overrides_with = "no_webui")]
    pub webui: bool,

    /// Serve the API only: `GET /` answers 404 and no browser is opened (env LLAMA_ARG_UI=0 too).
    #[arg(long = "no-webui", visible_alias = "no-ui", overrides_with = "webui")]
    pub no_webui: bool,

    /// Requests reuse a slot's cached prompt prefix unless they say otherwise (the default).
    #[arg(long = "cache-prompt", overrides_with = "no_cache_prompt")]
    pub cache_prompt: bool,

    /// Requests that do not set `cache_prompt` start from an empty cache.
    #[arg(long = "no-cache-prompt", overrides_with = "cache_prompt")]
    pub no_cache_prompt: bool,

    /// A chat that ends with an assistant message continues it (the default).
    #[arg(long = "prefill-assistant", overrides_with = "no_prefill_assistant")]
    pub prefill_assistant: bool,

    /// A chat that ends with an assistant message gets a new assistant turn after it.
    #[arg(long = "no-prefill-assistant", overrides_with = "prefill_assistant")]
    pub no_prefill_assistant: bool,

    /// Serve every endpoint under this path prefix (no trailing slash), e.g. /llama.
    #[arg(
        long = "api-prefix",
        value_name = "PREFIX",
        env = "LLAMA_ARG_API_PREFIX"
    )]
    pub api_prefix: Option<String>,

    /// Origins allowed to call the API from a browser page on another site, comma-separated
    /// (default: *, every origin echoed back); `localhost` echoes the Origin header only when it
    /// is on this machine.
    #[arg(
        long = "cors-origins",
        value_name = "ORIGINS",
        env = "LLAMA_ARG_CORS_ORIGINS"
    )]
    pub cors_origins: Option<String>,

    /// Methods a cross-origin page may use (default: GET, POST, DELETE, OPTIONS).
    #[arg(
        long = "cors-methods",
        value_name = "METHODS",
        env = "LLAMA_ARG_CORS_METHODS",
        default_value = "GET, POST, DELETE, OPTIONS"
    )]
    pub cors_methods: String,

    /// Request headers a cross-origin page may send (default: *).
    #[arg(
        long = "cors-headers",
        value_name = "HEADERS",
        env = "LLAMA_ARG_CORS_HEADERS",
        default_value = "*"
    )]
    pub cors_headers: String,

    /// Allow credentials on cross-origin requests (the default).
    #[arg(long = "cors-credentials", overrides_with = "no_cors_credentials")]
    pub cors_credentials: bool,

    /// Do not allow credentials on cross-origin requests.
    #[arg(long = "no-cors-credentials", overrides_with = "cors_credentials")]
    pub no_cors_credentials: bool,

    /// Context positions of each slot; without -c on the command line, -c becomes -np times this.
    #[arg(
        long = "kv-unified-per-slot",
        value_name = "N",
        env = "LLAMA_ARG_KV_UNIFIED_PER_SLOT"
    )]
    pub kv_per_slot: Option<usize>,

    /// Serve the files of this directory (under --api-prefix); `/` is its index.html, in place
    /// of the built-in chat page. Empty: none.
    #[arg(long = "path", value_name = "PATH", env = "LLAMA_ARG_STATIC_PATH")]
    pub static_path: Option<std::path::PathBuf>,

    /// Directory where POST /slots/ID?action=save writes slot files and action=restore reads
    /// them (default: slot actions are off).
    #[arg(long = "slot-save-path", value_name = "PATH")]
    pub slot_save_path: Option<std::path::PathBuf>,

    /// The switches above after their environment variables (set by [`ServerArgs::resolve`]).
    #[arg(skip)]
    pub switches: Switches,
}

/// The final state of the server's on/off flags.
#[derive(Debug, Clone, Copy, Default)]
pub struct Switches {
    pub slots: bool,
    pub webui: bool,
    pub cache_prompt: bool,
    pub cors_credentials: bool,
    pub prefill_assistant: bool,
}

impl ServerArgs {
    /// Settles each on/off pair: the command line, else its variable, else the default.
    pub fn resolve(&mut self, m: &ArgMatches) -> Result<(), String> {
        self.switches = Switches {
            slots: pair(m, "slots", "no_slots", "LLAMA_ARG_ENDPOINT_SLOTS", true)?,
            webui: pair(m, "webui", "no_webui", "LLAMA_ARG_UI", true)?,
            cache_prompt: pair(
                m,
                "cache_prompt",
                "no_cache_prompt",
                "LLAMA_ARG_CACHE_PROMPT",
                true,
            )?,
            cors_credentials: pair(
                m,
                "cors_credentials",
                "no_cors_credentials",
                "LLAMA_ARG_CORS_CREDENTIALS",
                true,
            )?,
            prefill_assistant: pair(
                m,
                "prefill_assistant",
                "no_prefill_assistant",
                "LLAMA_ARG_PREFILL_ASSISTANT",
                true,
            )?,
        };
        // The raw pairs agree with the outcome, whichever way it was reached.
        let sw = self.switches;
        (self.slots, self.no_slots) = (sw.slots, !sw.slots);
        (self.webui, self.no_webui) = (sw.webui, !sw.webui);
        (self.cache_prompt, self.no_cache_prompt) = (sw.cache_prompt, !sw.cache_prompt);
        (self.cors_credentials, self.no_cors_credentials) =
            (sw.cors_credentials, !sw.cors_credentials);
        (self.prefill_assistant, self.no_prefill_assistant) =
            (sw.prefill_assistant, !sw.prefill_assistant);
        if let Some(p) = &self.api_prefix {
            if !p.is_empty()
                && (!p.starts_with('/')
                    || p.ends_with('/')
                    || !p.bytes().all(|b| b.is_ascii_graphic()))
            {
                return Err(format!(
                    "--api-prefix {p}: expected a path starting with / and without a trailing /"
                ));
            }
        }
        if self.kv_per_slot.is_some_and(|n| n < 8) {
            return Err("--kv-unified-per-slot must be at least 8".to_string());
        }
        Ok(())
    }
}

const SLOT_CACHE: &str = "each slot keeps its own cache and a request takes the idle slot holding the longest common prefix";

fn empty(v: &str) -> bool {
    v.is_empty()
}

fn is_default(v: &str) -> bool {
    v == "default"
}

/// Server flags accepted without effect, or refused.
pub const FLAGS: &[Flag] = &[
    switch(
        &["reuse-port"],
        &[],
        Some("LLAMA_ARG_REUSE_PORT"),
        Effect::Refused("sharing a port between processes (SO_REUSEPORT)"),
    ),
    valued(
        &["ssl-key-file"],
        &[],
        "FNAME",
        Check::Text,
        Some("LLAMA_ARG_SSL_KEY_FILE"),
        Effect::Refused("HTTPS (TLS)"),
    ),
    valued(
        &["ssl-cert-file"],
        &[],
        "FNAME",
        Check::Text,
        Some("LLAMA_ARG_SSL_CERT_FILE"),
        Effect::Refused("HTTPS (TLS)"),
    ),
    valued(
        &["ui-config", "webui-config"],
        &[],
        "JSON",
        Check::Text,
        Some("LLAMA_ARG_UI_CONFIG"),
        Effect::Refused("default settings for the chat page"),
    ),
    valued(
        &["ui-config-file", "webui-config-file"],
        &[],
        "PATH",
        Check::Text,
        Some("LLAMA_ARG_UI_CONFIG_FILE"),
        Effect::Refused("default settings for the chat page"),
    ),
    switch(
        &["ui-mcp-proxy", "webui-mcp-proxy"],
        &[],
        Some("LLAMA_ARG_UI_MCP_PROXY"),
        Effect::Refused("the MCP CORS proxy"),
    ),
    switch(
        &["no-ui-mcp-proxy", "no-webui-mcp-proxy"],
        &[],
        None,
        Effect::NoOp("there is no MCP proxy"),
    ),
    valued(
        &["tools"],
        &[],
        "TOOL1,TOOL2,...",
        Check::Text,
        Some("LLAMA_ARG_TOOLS"),
        Effect::NoOpIf(empty, "an empty list", "built-in agent tools"),
    ),
    valued(
        &["tools-runtime"],
        &[],
        "OPTION",
        Check::Text,
        Some("LLAMA_ARG_TOOLS_RUNTIME"),
        Effect::NoOp("there are no built-in tools to run (--tools is refused)"),
    ),
    valued(
        &["mcp-servers-config"],
        &[],
        "PATH",
        Check::Text,
        Some("LLAMA_ARG_MCP_SERVERS_CONFIG"),
        Effect::Refused("MCP servers"),
    ),
    valued(
        &["mcp-servers-json"],
        &[],
        "JSON",
        Check::Text,
        Some("LLAMA_ARG_MCP_SERVERS_JSON"),
        Effect::Refused("MCP servers"),
    ),
    switch(
        &["agent"],
        &["-ag"],
        Some("LLAMA_ARG_AGENT"),
        Effect::Refused("the agent mode (CORS proxy and built-in tools)"),
    ),
    switch(
        &["no-agent"],
        &["-no-ag"],
        None,
        Effect::NoOp("there is no agent mode"),
    ),
    valued(
        &["sse-ping-interval"],
        &[],
        "N",
        Check::Int,
        Some("LLAMA_ARG_SSE_PING_INTERVAL"),
        Effect::NoOp("streams carry an event for every token; no pings are sent"),
    ),
    valued(
        &["models-dir"],
        &[],
        "PATH",
        Check::Text,
        Some("LLAMA_ARG_MODELS_DIR"),
        Effect::Refused("the multi-model router"),
    ),
    valued(
        &["models-preset"],
        &[],
        "PATH",
        Check::Text,
        Some("LLAMA_ARG_MODELS_PRESET"),
        Effect::Refused("the multi-model router"),
    ),
    valued(
        &["models-max"],
        &[],
        "N",
        Check::Int,
        Some("LLAMA_ARG_MODELS_MAX"),
        Effect::NoOp("there is no multi-model router (--models-dir is refused)"),
    ),
    switch(
        &["models-autoload"],
        &[],
        Some("LLAMA_ARG_MODELS_AUTOLOAD"),
        Effect::NoOp("there is no multi-model router (--models-dir is refused)"),
    ),
    switch(
        &["no-models-autoload"],
        &[],
        None,
        Effect::NoOp("there is no multi-model router (--models-dir is refused)"),
    ),
    switch(
        &["jinja"],
        &[],
        Some("LLAMA_ARG_JINJA"),
        Effect::NoOp("chat templates always run as Jinja here"),
    ),
    switch(
        &["no-jinja"],
        &[],
        None,
        Effect::NoOp("the built-in chat formats are Jinja templates too, so Jinja is always used"),
    ),
    valued(
        &["reasoning-effort"],
        &[],
        "LEVEL",
        Check::Text,
        Some("LLAMA_ARG_REASONING_EFFORT"),
        Effect::NoOpIf(
            is_default,
            "default (the template's own)",
            "passing a reasoning effort to chat templates",
        ),
    ),
    switch(
        &["reasoning-preserve"],
        &[],
        Some("LLAMA_ARG_REASONING_PRESERVE"),
        Effect::NoOp(
            "each turn's reasoning_content goes to the template; none is dropped before it",
        ),
    ),
    switch(
        &["no-reasoning-preserve"],
        &[],
        None,
        Effect::NoOp(
            "each turn's reasoning_content goes to the template, which decides what it shows",
        ),
    ),
    valued(
        &["slot-prompt-similarity"],
        &["-sps"],
        "SIMILARITY",
        Check::Float,
        None,
        Effect::NoOp(SLOT_CACHE),
    ),
    valued(
        &["sleep-idle-seconds"],
        &[],
        "SECONDS",
        Check::Int,
        None,
        Effect::NoOp(
            "the weights are mapped, not copied: an idle server's pages are the OS's to reclaim",
        ),
    ),
    valued(
        &["log-prompts-dir"],
        &[],
        "PATH",
        Check::Text,
        None,
        Effect::Refused("logging prompts to a directory"),
    ),
    valued(
        &["ctx-checkpoints", "swa-checkpoints"],
        &["-ctxcp"],
        "N",
        Check::Int,
        Some("LLAMA_ARG_CTX_CHECKPOINTS"),
        Effect::NoOp("caches here keep every position, so no checkpoints are needed to go back"),
    ),
    valued(
        &["checkpoint-min-step"],
        &["-cms"],
        "N",
        Check::Int,
        Some("LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT"),
        Effect::NoOp("caches here keep every position, so no checkpoints are needed to go back"),
    ),
    valued(
        &["cache-ram"],
        &["-cram"],
        "N",
        Check::Int,
        Some("LLAMA_ARG_CACHE_RAM"),
        Effect::NoOp(SLOT_CACHE),
    ),
    switch(
        &["kv-unified"],
        &["-kvu"],
        Some("LLAMA_ARG_KV_UNIFIED"),
        Effect::NoOp(SLOT_CACHE),
    ),
    switch(
        &["no-kv-unified"],
        &["-no-kvu"],
        None,
        Effect::NoOp(SLOT_CACHE),
    ),
    switch(
        &["cache-idle-slots"],
        &[],
        Some("LLAMA_ARG_CACHE_IDLE_SLOTS"),
        Effect::NoOp(SLOT_CACHE),
    ),
    switch(
        &["no-cache-idle-slots"],
        &[],
        None,
        Effect::NoOp(SLOT_CACHE),
    ),
    switch(
        &["cont-batching"],
        &["-cb"],
        Some("LLAMA_ARG_CONT_BATCHING"),
        Effect::NoOp("every step batches all busy slots, always"),
    ),
    switch(
        &["no-cont-batching"],
        &["-nocb"],
        None,
        Effect::NoOp("every step batches all busy slots; there is no other mode"),
    ),
];
