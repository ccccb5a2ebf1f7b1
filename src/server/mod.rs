//! The HTTP server: an OpenAI-compatible API, llama.cpp's native endpoints and a chat page, on
//! 127.0.0.1:8080 by default.
//!
//! Threads: one accepts connections into a waiting room (`admission`) from which a fixed pool
//! of connection workers takes them, client addresses taking turns and none holding more than
//! its share of the workers; a waiting connection costs its socket, not a thread. Only a
//! connection that finds the room full (its size follows the open-file limit) is answered 503
//! at once. Each worker reads
//! requests with hard limits and deadlines (`http`), routes them (`routes`) and, for
//! generation, submits a job to the one scheduler thread (`scheduler`) that owns the slots' KV
//! caches and batches every slot's next token into one forward pass.
//!
//! Owns HTTP, request/response shapes and scheduling; the model, tokenizer, sampler and chat
//! templates are used through their public APIs.

mod admission;
mod anthropic;
mod base64;
mod chat_reply;
mod choices;
mod conn;
mod continuation;
mod cors;
mod embeddings;
mod error;
mod generation;
pub mod http;
mod infill;
mod json;
mod lora;
mod media;
mod metrics;
mod native;
mod openai;
mod protocol;
mod rerank;
mod response;
mod responses;
mod routes;
mod scheduler;
mod slot_actions;
mod slot_file;
mod slots;
mod socket;
mod sse;
mod static_files;
mod tools;
mod webui;

pub use error::ApiError;
pub use metrics::Metrics;
pub use scheduler::{Scheduler, SchedulerOptions};

use crate::chat::ChatTemplate;
use crate::cli::Cli;
use crate::engine::loaded::Loaded;
use crate::engine::media::Media;
use crate::sampling::SamplingParams;
use admission::{RoomLimits, WaitingRoom};
use anyhow::{bail, Context, Result};
use conn::{Conn, Listener};
use http::{Limits, RequestReader};
use response::Responder;
use std::io::Write;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything the server is configured with.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Addresses to listen on (`--host`, comma-separated), each on `port`.
    pub hosts: Vec<String>,
    /// 0: any free port.
    pub port: u16,
    pub n_slots: usize,
    /// Context positions of each slot.
    pub n_ctx_slot: usize,
    pub n_batch: usize,
    /// Keys a request may present (`--api-key`, `--api-key-file`); none: no key needed.
    pub api_keys: Vec<String>,
    /// The model's name in `/v1/models` and responses.
    pub model_name: String,
    /// Every alias of the model (`--alias`), the name first.
    pub aliases: Vec<String>,
    /// `--tags`, informational.
    pub tags: Vec<String>,
    pub model_path: String,
    /// Defaults for requests that do not set them.
    pub sampling: SamplingParams,
    /// Requests without a seed get a fresh random one (`-s -1`).
    pub seed_random: bool,
    pub n_predict: i64,
    pub http_threads: usize,
    /// Most connections of one client address the workers serve at once (more wait).
    pub per_client_connections: usize,
    pub limits: Limits,
    pub open_browser: bool,
    /// Serve the chat page (`--no-webui` turns it off).
    pub webui: bool,
    /// Serve `GET /slots` (`--no-slots` turns it off).
    pub slots_endpoint: bool,
    /// `GET /metrics` is served (`--metrics`).
    pub metrics_endpoint: bool,
    /// `cache_prompt` of requests that do not set it (`--no-cache-prompt`).
    pub cache_prompt: bool,
    /// Every path is served under this prefix (`--api-prefix`; empty: none).
    pub api_prefix: String,
    /// Which other sites' pages may call the API.
    pub cors: cors::Cors,
    /// `POST /props` is allowed (`--props`).
    pub props_writable: bool,
    /// `--context-shift` and `--keep`.
    pub context_shift: bool,
    pub n_keep: i64,
    /// Speculative decoding flags (validated).
    pub spec: crate::engine::speculative::setup::SpecOptions,
    /// The embedding endpoints are served (`--embedding`).
    pub embeddings: bool,
    /// `--pooling` (`None`: the model's default).
    pub pooling: Option<crate::embedding::Pooling>,
    /// `/infill` prompts put the suffix first (`--spm-infill`).
    pub spm_infill: bool,
    /// `-b`, the logical batch: `/infill` sizes its prefix and suffix from it, as llama-server
    /// does.
    pub batch_size: usize,
    /// Where slot files are saved and restored (`--slot-save-path`; `None`: slot actions are
    /// off).
    pub slot_save_path: Option<std::path::PathBuf>,
    /// Static files served in place of the chat page (`--path`; `None`: the chat page).
    pub static_path: Option<std::path::PathBuf>,
    /// Answers carry llama-server's `__verbose` unless a request says otherwise (`--verbose`,
    /// or `-lv` above 9, as llama-server decides it).
    pub verbose: bool,
    /// Where a chat reply's thoughts go (`--reasoning-format`; a request's own
    /// `reasoning_format` wins).
    pub reasoning_format: crate::chat::reasoning::ReasoningFormat,
    /// Variables every chat template is given (`--chat-template-kwargs`, and `enable_thinking`
    /// from `--reasoning on|off` or `--reasoning-budget 0`); a request's `chat_template_kwargs`
    /// wins.
    pub template_kwargs: serde_json::Map<String, serde_json::Value>,
    /// Tokens a thought may run (`--reasoning-budget`; `None`: unlimited), and the text forced
    /// before its end tag when they run out (`--reasoning-budget-message`).
    pub reasoning_budget: Option<usize>,
    pub reasoning_budget_message: String,
    /// Replies are all content: no tool calls are read out of them (`--skip-chat-parsing`).
    pub skip_chat_parsing: bool,
    /// A conversation that ends with an assistant turn continues it (`--prefill-assistant`,
    /// the default; `--no-prefill-assistant` closes it and opens a new one).
    pub prefill_assistant: bool,
}

/// What every handler sees.
pub struct State {
    pub loaded: Arc<Loaded>,
    pub template: ChatTemplate,
    pub scheduler: Scheduler,
    pub metrics: Arc<Metrics>,
    pub config: ServerConfig,
    /// Start time, seconds since the epoch.
    pub started: u64,
    /// Bound to a loopback address: browser requests must name this machine.
    pub loopback: bool,
    /// The projector of `--mmproj`: requests may carry images.
    pub media: Option<Arc<Media>>,
    /// The LoRA adapters of `--lora` and their global scales (`/lora-adapters`).
    pub lora: lora::LoraState,
}

/// The server configuration from the command line: `-c` (`n_ctx`, already resolved) is split
/// between `-np` slots, as llama-server does.
pub fn config_from_cli(cli: &Cli, model_name: &str, n_ctx: usize) -> Result<ServerConfig> {
    let n_slots = cli.slot_count();
    if n_slots == 0 {
        bail!("-np/--parallel must be at least 1");
    }
    let n_ctx_slot = match cli.srv.kv_per_slot {
        // llama.cpp's per-slot limit: -c, when given, still bounds the whole.
        Some(per) if cli.ctx_size_given => per.min(n_ctx / n_slots),
        Some(per) => per,
        None => n_ctx / n_slots,
    };
    if n_ctx_slot < 8 {
        bail!(
            "a context of {n_ctx} tokens split between {n_slots} slots leaves {n_ctx_slot} per slot: raise -c or lower -np"
        );
    }
    let api_keys = api_keys(cli)?;
    // As llama-server: with no --alias the model is named by the path given to -m (or, in a
    // llamafile, by the name of its GGUF inside).
    let mut aliases = cli.aliases();
    if aliases.is_empty() {
        aliases.push(model_name.to_string());
    }
    let hosts = crate::cli::split_list(Some(&cli.host));
    if hosts.is_empty() {
        bail!("--host: give at least one address");
    }
    if !cfg!(unix) {
        if let Some(sock) = hosts.iter().find(|h| is_unix_socket(h)) {
            bail!("--host {sock}: UNIX sockets exist on Unix only");
        }
    }
    let workers = cli.http_workers();
    let sw = cli.srv.switches;
    Ok(ServerConfig {
        hosts,
        port: cli.port,
        n_slots,
        n_ctx_slot,
        n_batch: cli.forward_batch(),
        api_keys,
        model_name: aliases[0].clone(),
        aliases,
        tags: crate::cli::split_list(cli.srv.tags.as_deref()),
        model_path: model_name.to_string(),
        sampling: cli.sampling_params(cli.seed.max(0) as u64)?,
        seed_random: cli.seed < 0,
        n_predict: cli.n_predict,
        http_threads: workers,
        per_client_connections: per_client_connections(workers),
        limits: Limits::with_timeout(Duration::from_secs(cli.timeout)),
        open_browser: !cli.nobrowser && sw.webui,
        webui: sw.webui,
        slots_endpoint: sw.slots,
        metrics_endpoint: cli.compat.metrics,
        cache_prompt: sw.cache_prompt,
        api_prefix: cli.srv.api_prefix.clone().unwrap_or_default(),
        props_writable: cli.compat.props,
        cors: cors::Cors::new(
            cli.srv.cors_origins.as_deref(),
            &cli.srv.cors_methods,
            &cli.srv.cors_headers,
            sw.cors_credentials,
        ),
        context_shift: cli.context_shift,
        n_keep: cli.keep,
        spec: {
            let spec = cli.spec.options();
            crate::engine::speculative::setup::spec_types(&spec)?;
            spec
        },
        embeddings: cli.emb.embedding,
        pooling: cli.emb.pooling_type,
        spm_infill: cli.emb.spm_infill,
        batch_size: cli.batch_size.max(1),
        slot_save_path: directory(cli.srv.slot_save_path.as_deref(), "--slot-save-path")?,
        verbose: cli.verbose || cli.compat.log_verbosity.is_some_and(|v| v > 9),
        reasoning_format: crate::chat::reasoning::ReasoningFormat::parse(
            cli.reasoning.format_name(),
        )
        .unwrap_or(crate::chat::reasoning::ReasoningFormat::Deepseek),
        template_kwargs: cli.reasoning.template_kwargs(),
        reasoning_budget: cli.reasoning.budget(),
        reasoning_budget_message: cli.reasoning.reasoning_budget_message.clone(),
        skip_chat_parsing: cli.reasoning.skip_chat_parsing,
        prefill_assistant: sw.prefill_assistant,
        static_path: directory(cli.srv.static_path.as_deref(), "--path")?,
    })
}

/// A directory flag's value, which must name a directory (`None` or empty: not given).
fn directory(path: Option<&std::path::Path>, flag: &str) -> Result<Option<std::path::PathBuf>> {
    match path {
        None => Ok(None),
        Some(p) if p.as_os_str().is_empty() => Ok(None),
        Some(p) if p.is_dir() => Ok(Some(p.to_path_buf())),
        Some(p) => bail!("{flag} {}: not a directory", p.display()),
    }
}

/// The keys of `--api-key` (comma-separated) and `--api-key-file` (one a line, `#` comments).
fn api_keys(cli: &Cli) -> Result<Vec<String>> {
    let mut keys = crate::cli::split_list(cli.api_key.as_deref());
    if cli.api_key.is_some() && keys.is_empty() {
        bail!("--api-key must not be empty");
    }
    if let Some(path) = &cli.srv.api_key_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read --api-key-file {}", path.display()))?;
        let before = keys.len();
        keys.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(String::from),
        );
        if keys.len() == before {
            bail!("--api-key-file {}: no keys in the file", path.display());
        }
    }
    if let Some(k) = keys
        .iter()
        .find(|k| k.chars().any(|c| c.is_control() || c == ' '))
    {
        bail!(
            "API key {:?}...: keys must be single words without control characters",
            k.chars().take(4).collect::<String>()
        );
    }
    Ok(keys)
}

/// The share of the `workers` connection workers one client address may hold at once: three
/// quarters, so that a quarter is always left for everyone else (its other connections wait).
pub fn per_client_connections(workers: usize) -> usize {
    (workers - workers / 4).max(1)
}

/// `--server` (or no prompt): serves `loaded` as the command line says, until the process ends.
pub fn serve_from_cli(
    cli: &Cli,
    loaded: Loaded,
    model_name: &str,
    n_ctx: usize,
    media: Option<Media>,
) -> Result<()> {
    let config = config_from_cli(cli, model_name, n_ctx)?;
    rerank::check_model(&loaded, config.embeddings, config.pooling)?;
    let template = crate::chat::template_override(cli, &loaded.tokenizer)?;
    let draft = match &cli.spec.model_draft {
        Some(name) => Some(
            crate::engine::loaded::load_model(name, None)
                .with_context(|| format!("cannot load the draft model {name}"))?,
        ),
        None => None,
    };
    serve(loaded, config, template, draft, media)
}

/// A `--host` value that names a UNIX socket (a path ending in `.sock`, as llama-server
/// tells them apart).
fn is_unix_socket(host: &str) -> bool {
    host.ends_with(".sock")
}

/// Listens on every address of `hosts`: TCP ones on `port` (the first may move up to 10 ports
/// on when it is taken, and the others then use the port it got), UNIX sockets at their paths.
fn listen(hosts: &[String], port: u16) -> Result<Vec<Listener>> {
    let mut port = port;
    let mut first_tcp = true;
    let mut out = Vec::new();
    for host in hosts {
        if is_unix_socket(host) {
            let l = Listener::unix(std::path::Path::new(host))
                .with_context(|| format!("cannot listen on the UNIX socket {host}"))?;
            out.push(l);
        } else if first_tcp {
            let l = bind(host, port)?;
            port = l.local_addr()?.port();
            first_tcp = false;
            out.push(Listener::Tcp(l));
        } else {
            let l = TcpListener::bind((host.as_str(), port))
                .with_context(|| format!("cannot listen on {host}:{port}"))?;
            out.push(Listener::Tcp(l));
        }
    }
    Ok(out)
}

/// Binds `host:port`, or the next free port up to `port + 10` when it is taken.
pub fn bind(host: &str, port: u16) -> Result<TcpListener> {
    let tries = if port == 0 { 1 } else { 11 };
    for k in 0..tries {
        let p = port.saturating_add(k);
        match TcpListener::bind((host, p)) {
            Ok(l) => return Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && k + 1 < tries => {
                eprintln!("llamafile: port {p} is in use, trying {}", p + 1);
            }
            Err(e) => {
                return Err(e).with_context(|| format!("cannot listen on {host}:{p}"));
            }
        }
    }
    bail!("ports {port} to {} are all in use", port.saturating_add(10))
}

/// Serves until the process ends.
pub fn serve(
    loaded: Loaded,
    config: ServerConfig,
    template: Option<ChatTemplate>,
    draft: Option<Loaded>,
    media: Option<Media>,
) -> Result<()> {
    let template = match template {
        Some(t) => t,
        None => {
            ChatTemplate::from_gguf(&loaded.model.file, &loaded.tokenizer).unwrap_or_else(|e| {
                eprintln!("llamafile: {e}; using ChatML instead");
                ChatTemplate::chatml()
            })
        }
    };
    let listeners = listen(&config.hosts, config.port)?;
    // Bound to loopback only (UNIX sockets are local): browser requests must name this machine.
    let loopback = listeners.iter().all(|l| match l {
        Listener::Tcp(t) => t.local_addr().is_ok_and(|a| a.ip().is_loopback()),
        #[cfg(unix)]
        Listener::Unix(..) => true,
    });
    let loaded = Arc::new(loaded);
    let metrics = Arc::new(Metrics::default());
    let scheduler = Scheduler::start(
        loaded.clone(),
        draft.map(Arc::new),
        &config.spec,
        SchedulerOptions {
            n_slots: config.n_slots,
            n_ctx_slot: config.n_ctx_slot,
            n_batch: config.n_batch,
            context_shift: config.context_shift,
            n_keep: config.n_keep,
        },
        metrics.clone(),
    )?;
    let lora = lora::LoraState::new(loaded.model.lora.clone(), loaded.model.lora_mix().clone());
    let state = Arc::new(State {
        loaded,
        template,
        scheduler,
        metrics,
        loopback,
        started: openai::now(),
        config,
        media: media.map(Arc::new),
        lora,
    });
    let urls = listeners
        .iter()
        .map(Listener::url)
        .collect::<std::io::Result<Vec<_>>>()?;
    println!(
        "llamafile: server listening on {} ({} slots of {} tokens)",
        urls.join(", "),
        state.config.n_slots,
        state.config.n_ctx_slot
    );
    std::io::stdout().flush()?;
    if state.config.open_browser {
        if let Some(url) = urls.iter().find(|u| u.starts_with("http")) {
            open_browser(url);
        }
    }

    let workers = state.config.http_threads.max(1);
    let room = WaitingRoom::new(room_limits(
        workers,
        state.config.per_client_connections,
        crate::platform::raise_open_file_limit(),
    ));
    for i in 0..workers {
        let room = room.clone();
        let state = state.clone();
        std::thread::Builder::new()
            .name(format!("http-{i}"))
            .spawn(move || loop {
                let (conn, ticket) = room.take();
                // A bug in one request must not cost the pool a worker.
                let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    serve_connection(&state, conn, Instant::now())
                }));
                drop(ticket);
                if served.is_err() {
                    eprintln!("llamafile: a request handler panicked; connection closed");
                }
            })
            .context("cannot start the HTTP workers")?;
    }
    let mut listeners = listeners.into_iter();
    let first = listeners.next().context("no address to listen on")?;
    for l in listeners {
        let room = room.clone();
        std::thread::Builder::new()
            .name("accept".into())
            .spawn(move || accept_loop(&l, &room))
            .context("cannot start a listener")?;
    }
    accept_loop(&first, &room)
}

/// The waiting room's limits for `workers` workers of which one address may hold
/// `per_client`, under an open-file limit of `open_files`: the room holds as many
/// connections as there are files to spare (a file each, a reserve kept for the model, the
/// workers' own and the slot files), at most 16384; one address may fill three quarters.
fn room_limits(workers: usize, per_client: usize, open_files: Option<u64>) -> RoomLimits {
    const RESERVE: usize = 128;
    let files = open_files.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let waiting = files
        .saturating_sub(RESERVE + workers)
        .clamp(workers, 16384);
    RoomLimits {
        active_per_client: per_client,
        waiting,
        waiting_per_client: (waiting - waiting / 4).max(1),
    }
}

/// Accepts connections on `listener` into the waiting room, answering 503 to those it has no
/// place for.
fn accept_loop(listener: &Listener, room: &WaitingRoom<Conn>) -> Result<()> {
    loop {
        let Ok((stream, peer)) = listener.accept() else {
            continue;
        };
        if let Err((stream, why)) = room.enter(peer, stream) {
            refuse_busy(stream, &why.to_string());
        }
    }
}

/// Answers 503 with `message` to a connection that is not served.
fn refuse_busy(stream: Conn, message: &str) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let unread = stream.try_clone();
    let e = ApiError::unavailable(message);
    let mut rsp = Responder::new(stream, true, false);
    if rsp
        .send(&e.response().with_header("Retry-After", "1"))
        .is_ok()
    {
        if let Ok(unread) = unread {
            linger_in_background(unread);
        }
    }
}

/// Refused connections lingering at once, at most (each on a short-lived thread).
const MAX_LINGERING: usize = 16;
static LINGERING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// [`linger`] off the accept loop, so the 503 reaches a client whose request is still unread
/// instead of a connection reset; beyond [`MAX_LINGERING`] at once the connection is closed
/// at once (a flood of refused clients must not cost a thread each).
fn linger_in_background(stream: Conn) {
    use std::sync::atomic::Ordering;
    if LINGERING.fetch_add(1, Ordering::AcqRel) >= MAX_LINGERING {
        LINGERING.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("linger".into())
        .spawn(move || {
            linger(&stream);
            LINGERING.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        LINGERING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves the requests of one connection, taken from the waiting room at `taken` (its first
/// request's head is due a head timeout later), until it closes or errs.
fn serve_connection(state: &State, stream: Conn, taken: Instant) {
    stream.set_nodelay();
    let _ = stream.set_write_timeout(Some(state.config.limits.write_timeout));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = RequestReader::new(stream, state.config.limits.clone(), taken);
    loop {
        match reader.next_request(&mut writer) {
            Ok(req) => {
                state.metrics.http_requests.add(1);
                let Ok(out) = writer.try_clone() else { return };
                let mut rsp = Responder::new(out, req.http11, req.keep_alive);
                routes::handle(state, &req, &mut rsp);
                if !rsp.keep_alive {
                    break;
                }
            }
            Err(e) => {
                if let Some(status) = e.status() {
                    state.metrics.http_requests.add(1);
                    state.metrics.http_errors.add(1);
                    let err = ApiError::new(status, "invalid_request_error", e.to_string());
                    if let Ok(out) = writer.try_clone() {
                        let _ = Responder::new(out, true, false).send(&err.response());
                    }
                    linger(reader.stream());
                }
                break;
            }
        }
    }
    let _ = writer.flush();
    let _ = writer.shutdown(std::net::Shutdown::Both);
}

/// After an error answered before the request was read in full: stop sending, then read and
/// discard what the client is still sending for a moment, so that closing does not reset the
/// connection before the client has read the answer.
fn linger(stream: &Conn) {
    use std::io::Read;
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let start = std::time::Instant::now();
    let mut buf = [0u8; 16384];
    let mut s = stream;
    while start.elapsed() < Duration::from_secs(1) {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
    }
}

/// Opens `url` in the desktop's browser, when there is a desktop session.
fn open_browser(url: &str) {
    let desktop = std::env::var_os("DISPLAY").is_some_and(|v| !v.is_empty())
        || std::env::var_os("WAYLAND_DISPLAY").is_some_and(|v| !v.is_empty())
        || cfg!(any(target_os = "macos", target_os = "windows"));
    if !desktop {
        return;
    }
    let mut cmd = if cfg!(target_os = "macos") {
        std::process::Command::new("open")
    } else if cfg!(target_os = "windows") {
        let mut c = std::process::Command::new("explorer");
        c.arg(url);
        let _ = c.spawn();
        return;
    } else {
        std::process::Command::new("xdg-open")
    };
    let _ = cmd
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}
