//! The program's modes (generate, tokenize, perplexity) wired from validated command-line
//! options to the engine. This is the edge where errors gain context for the user.

use crate::backend::{Backend, GpuLayers, LayerPlan};
use crate::bundle::Bundle;
use crate::cli::{Cli, Devices};
use crate::engine::loaded::{load_model, load_model_from, Loaded};
use crate::engine::media::Media;
use crate::engine::session::Session;
use crate::engine::PlacedModel;
use crate::escapes::process_escapes;
use crate::gpu::backend::{lines_staying_on_cpu, CudaBackend, WeightsError};
use crate::gpu::encoder::CudaEncoder;
use crate::gpu::startup::{probe_for_run, GpuStart};
use crate::gpu::{line_on_gpu, GpuMode};
use crate::perplexity::perplexity;
use crate::sampling::{Sampler, TokenVocab};
use crate::stop_text::StopText;
use crate::timings::RunClock;
use crate::tokenizer::{StreamDecoder, Tokenizer};
use anyhow::{bail, Context, Result};
use std::io::Write;
use std::sync::Arc;

/// Places `model`'s blocks as `-ngl` asks (llama.cpp's default when absent: `auto`) on the GPU
/// the start-up probe found, and prints the start line. The plan's device layers that the CUDA
/// kernels cannot run (experts, latent attention, a weight type or width without kernels) stay on the
/// CPU, a line per reason saying which; the others go to the GPU, one CUDA backend per run of
/// consecutive blocks. Without a GPU, when the model as a whole is refused (YaRN, wide heads) or
/// none of its blocks can run there, or when a backend cannot be built (device memory), every
/// block stays where loading put it (the CPU, or the debug split of `LLAMAFILE_SPLIT_LAYERS`)
/// and the line says why; with `--gpu nvidia` that is an error instead.
fn place_layers(cli: &Cli, model: &mut PlacedModel, gpu: &GpuStart, mode: GpuMode) -> Result<()> {
    let ngl = cli
        .n_gpu_layers
        .as_deref()
        .and_then(GpuLayers::parse)
        .unwrap_or(GpuLayers::Auto);
    let n_layer = model.config.n_layer;
    let devices = cli.rpc.devices().map_err(anyhow::Error::msg)?;
    if devices == Some(Devices::Nothing) {
        // `--device none`: no GPU, no worker.
        return Ok(());
    }
    let named = match &devices {
        Some(Devices::Named(names)) => Some(names.as_slice()),
        _ => None,
    };
    if let Some(endpoints) = cli.rpc.endpoints().map_err(anyhow::Error::msg)? {
        if let Some(cuda) = named.and_then(|n| n.iter().find(|d| d.starts_with("CUDA"))) {
            bail!("--device {cuda}: the GPU and --rpc workers are not used together here");
        }
        let split = cli.rpc.split().map_err(anyhow::Error::msg)?;
        let timeout = std::time::Duration::from_secs(cli.timeout);
        let plan =
            crate::backend::rpc::start(model, &endpoints, named, ngl, split.as_deref(), timeout)?;
        plan.notes.iter().for_each(|n| eprintln!("{n}"));
        model.set_placement(plan.placement)?;
        return Ok(());
    }
    if let Some(rpc) = named.and_then(|n| n.iter().find(|d| d.starts_with("RPC"))) {
        bail!("--device: invalid device: {rpc} (no --rpc workers; see --list-devices)");
    }
    let GpuStart::Found(opened) = gpu else {
        for line in gpu.lines(0, n_layer) {
            eprintln!("{line}");
        }
        return Ok(());
    };
    for note in &opened.notes {
        eprintln!("{note}");
    }
    let info = opened.device.info();
    let plan = LayerPlan::new(ngl, n_layer, true);
    if plan.n_device() == 0 {
        eprintln!("{}", line_on_gpu(info, 0, n_layer));
        return Ok(());
    }
    let refuse = |e: WeightsError| -> Result<()> {
        if mode == GpuMode::Nvidia {
            bail!("--gpu nvidia: {info}: {e}");
        }
        eprintln!("{} ({e}); running on CPU", line_on_gpu(info, 0, n_layer));
        Ok(())
    };
    if let Err(e) = CudaBackend::supports_model(model) {
        return refuse(e);
    }
    let mut refused: Vec<(usize, WeightsError)> = plan
        .device
        .clone()
        .filter_map(|il| CudaBackend::supports(model, il).err().map(|e| (il, e)))
        .collect();
    let head = CudaBackend::supports_head(model);
    let split = plan.split(|il| !refused.iter().any(|(r, _)| *r == il), head.is_ok());
    if split.n_device() == 0 {
        return refuse(refused.swap_remove(0).1);
    }
    let mut devices: Vec<Arc<dyn Backend>> = Vec::new();
    let runs: Vec<_> = split.device_runs().collect();
    for (i, layers) in runs.iter().enumerate() {
        let with_head = split.head_on_device && i + 1 == runs.len();
        match CudaBackend::new(model, &opened.device, layers.clone(), with_head) {
            Ok(backend) => devices.push(Arc::new(backend)),
            Err(e) => return refuse(e),
        }
    }
    model.set_placement(split.placement(devices)?)?;
    for line in lines_staying_on_cpu(&refused) {
        eprintln!("{line}");
    }
    if plan.head_on_device && !split.head_on_device {
        let why = match head {
            Err(e) => e.to_string(),
            Ok(()) => format!("layer {} stays there", n_layer - 1),
        };
        eprintln!("llamafile: the output head stays on the CPU: {why}");
    }
    if !refused.is_empty() {
        eprintln!("llamafile: {}", model.placement().describe());
    }
    eprintln!("{}", line_on_gpu(info, split.n_device(), n_layer));
    Ok(())
}

/// `--list-devices`: the devices blocks can be offloaded to, as llama.cpp prints them (the CPU
/// is not listed): the devices of the `--rpc` workers, `  RPC0: HOST:PORT (TOTAL MiB, FREE MiB
/// free)`, or `  (none)`.
fn list_devices(cli: &Cli) -> Result<()> {
    let mut lines = Vec::new();
    if let Some(endpoints) = cli.rpc.endpoints().map_err(anyhow::Error::msg)? {
        let timeout = std::time::Duration::from_secs(cli.timeout);
        lines = crate::backend::rpc::device_lines(&endpoints, timeout)?;
    }
    if lines.is_empty() {
        lines.push("  (none)".to_string());
    }
    println!("Available devices:\n{}", lines.join("\n"));
    Ok(())
}

/// `--upgrade-engine OLD OUT`: this executable with OLD's entries.
fn upgrade_engine(old: &std::path::Path, out: &std::path::Path) -> Result<()> {
    let engine = std::env::current_exe().context("cannot find this executable")?;
    let done = crate::upgrade::upgrade(&engine, old, out).context("--upgrade-engine")?;
    eprintln!(
        "llamafile: wrote {}: this engine ({} bytes) with {}'s {}",
        out.display(),
        done.engine_len,
        old.display(),
        done.entries.join(", ")
    );
    Ok(())
}

/// The model to run: `-m`, or else the one GGUF inside our own ZIP.
fn model_name(cli: &Cli, own: Option<&Bundle>) -> Result<String> {
    if let Some(m) = &cli.model {
        return Ok(m.clone());
    }
    let ggufs: Vec<&str> = own
        .map(|b| b.gguf_entries().map(|e| e.name.as_str()).collect())
        .unwrap_or_default();
    match ggufs.as_slice() {
        [one] => Ok(one.to_string()),
        [] => bail!("no model given: use -m FILE.gguf"),
        many => bail!(
            "no model given and this llamafile holds several ({}): use -m NAME",
            many.join(", ")
        ),
    }
}

/// The prompt text from `-p` or `-f`, with escapes processed unless `--no-escape`.
pub fn prompt_text(cli: &Cli) -> Result<Option<String>> {
    let text = match (&cli.prompt, &cli.file) {
        (Some(_), Some(_)) => bail!("give the prompt with -p or -f, not both"),
        (Some(p), None) => p.clone(),
        (None, Some(f)) => {
            let bytes = std::fs::read(f)
                .with_context(|| format!("cannot read prompt file {}", f.display()))?;
            let mut s = String::from_utf8(bytes).map_err(|e| {
                anyhow::anyhow!(
                    "prompt file {} is not UTF-8 (byte offset {})",
                    f.display(),
                    e.utf8_error().valid_up_to()
                )
            })?;
            if s.ends_with('\n') {
                s.pop();
            }
            s
        }
        (None, None) => return Ok(None),
    };
    Ok(Some(if cli.no_escape {
        text
    } else {
        process_escapes(&text)
    }))
}

/// Runs the mode the command line asks for; `own` is our executable's ZIP, if any.
pub fn run(cli: &Cli, own: Option<&Bundle>) -> Result<()> {
    if let Some([old, out]) = cli.upgrade_engine.as_deref() {
        return upgrade_engine(old, out);
    }
    if cli.list_devices {
        return list_devices(cli);
    }
    let mut clock = RunClock::start();
    let threads = cli
        .thread_count()
        .unwrap_or_else(crate::cores::physical_cores)
        .max(1);
    crate::pool::init(threads);
    let name = model_name(cli, own)?;
    // Before the model loads: `--gpu nvidia` without a usable GPU fails at once.
    let gpu_opts = cli.gpu.options().map_err(anyhow::Error::msg)?;
    let gpu = probe_for_run(&gpu_opts, cli.n_gpu_layers.as_deref()).map_err(anyhow::Error::msg)?;
    let mut loaded = load_model_from(&name, own, cli.compat.weights_in_memory())?;
    if loaded.model.config.arch.is_encoder() {
        encoder_use(cli, &loaded.model, gpu_opts.mode)?;
    } else {
        place_layers(cli, &mut loaded.model, &gpu, gpu_opts.mode)?;
    }
    loaded.model.set_kv_types(cli.compat.kv_types())?;
    for ((path, _), scale) in cli.lora.adapters.iter().zip(cli.lora.initial_scales()) {
        loaded.model.add_lora(std::path::Path::new(path), scale)?;
    }
    if cli.compat.lock_weights() {
        if let Err(e) = loaded.model.file.shared_bytes().lock_in_memory() {
            eprintln!(
                "llamafile: --mlock: cannot lock the weights in memory ({e}){}",
                crate::platform::LOCK_HINT
            );
        }
    }
    clock.mark_loaded();
    if cli.verbose {
        let c = &loaded.model.config;
        eprintln!(
            "llamafile: {:?}, {} layers, {} embd, {} heads ({} kv), vocab {}; {} threads; cpu kernels: {}",
            c.arch,
            c.n_layer,
            c.n_embd,
            c.n_head,
            c.n_head_kv,
            c.n_vocab,
            threads,
            crate::quant::kernel_variant()
        );
    }
    if cli.verbose {
        eprintln!("llamafile: {}", loaded.model.placement().describe());
    }
    if cli.bench {
        return crate::bench::run(cli, &loaded, &name, threads);
    }
    let media = load_media(cli, own, &loaded.model, &gpu)?;
    let prompt = prompt_text(cli)?;
    if cli.tokenize {
        let text = prompt.unwrap_or_default();
        let ids = loaded
            .tokenizer
            .encode(&text, !cli.no_bos, !cli.no_parse_special);
        println!("{}", serde_json::to_string(&ids)?);
        return Ok(());
    }
    if cli.perplexity {
        let Some(text) = prompt else {
            bail!("--perplexity needs a text: use -f FILE")
        };
        return run_perplexity(cli, &loaded, &text);
    }
    if cli.chat {
        let system = cli.compat.system_prompt.clone().or(prompt);
        let n_ctx = context_size(cli, &loaded.model);
        return crate::chat::run_from_cli(cli, &loaded, system, n_ctx, media.as_ref());
    }
    if let (Some(img), None, false) = (cli.media.image.first(), &prompt, cli.server) {
        bail!("--image {img}: give a prompt with -p (or use --chat and /image PATH)");
    }
    if cli.server || (prompt.is_none() && !cli.cli) {
        let n_ctx = context_size(cli, &loaded.model);
        return crate::server::serve_from_cli(cli, loaded, &name, n_ctx, media);
    }
    let Some(text) = prompt else {
        bail!("no prompt given: use -p TEXT or -f FILE")
    };
    if let (Some(media), false) = (&media, cli.media.image.is_empty()) {
        let n_ctx = context_size(cli, &loaded.model);
        return crate::chat::run_media_turn(cli, &loaded, media, &text, n_ctx);
    }
    run_generate(cli, &loaded, &text, clock)
}

/// The projector of `--mmproj` (none with `--no-mmproj`), checked against the model; its
/// encoder's matrix products and attention on the GPU the start-up probe found, unless
/// `--no-mmproj-offload`.
fn load_media(
    cli: &Cli,
    own: Option<&Bundle>,
    model: &PlacedModel,
    gpu: &GpuStart,
) -> Result<Option<Media>> {
    let Some(name) = cli.media.projector() else {
        if let Some(img) = cli.media.image.first() {
            bail!("--image {img}: there is no projector to read it (give --mmproj FILE)");
        }
        return Ok(None);
    };
    let mut media = Media::load(name, own).with_context(|| format!("--mmproj {name}"))?;
    media
        .check_model(model)
        .with_context(|| format!("--mmproj {name}"))?;
    let limits = cli.media.token_limits();
    if limits && media.layout.dynamic_size {
        // This mtmd then slices a tiled projector's image as LLaVA-UHD does, in tiles of other
        // sizes; for one that keeps the image's size it moves the token budget.
        let what = match media.layout.tiles {
            Some(_) => "cuts images into tiles of other sizes",
            None => "moves the budget of tokens an image is scaled into",
        };
        bail!(
            "--image-min-tokens/--image-max-tokens: with this {} projector llama.cpp {what}, which is not built here (leave them out)",
            media.projector.ty.name()
        );
    }
    if let (GpuStart::Found(opened), true) = (gpu, cli.media.mmproj_offload) {
        let encoder = CudaEncoder::new(&opened.device);
        media.projector.set_device(Some(Arc::new(encoder)));
        eprintln!(
            "gpu: the image encoder's matrix products and attention run on the {} too",
            opened.device.info().name
        );
    }
    if cli.verbose {
        let p = &media.projector;
        let place = p.device_name().unwrap_or_else(|| "the CPU".to_string());
        eprintln!(
            "llamafile: projector {name}: {:?}, {}x{} input, {} tokens per image; the image encoder runs on {place}",
            p.ty, p.hparams.image_size, p.hparams.image_size, p.n_image_tokens()
        );
        if limits {
            eprintln!("llamafile: --image-min-tokens/--image-max-tokens: ignored, this projector's images have a fixed size (as in llama.cpp)");
        }
    }
    Ok(Some(media))
}

fn context_size(cli: &Cli, model: &PlacedModel) -> usize {
    if cli.ctx_size == 0 {
        model.config.n_ctx_train
    } else if model.config.arch.is_encoder() {
        // An encoder has no position past its learned ones.
        cli.ctx_size.min(model.config.n_ctx_train)
    } else {
        cli.ctx_size
    }
}

/// An encoder (BERT) computes embeddings and rerank scores only, on the CPU, with no adapters
/// or drafts: anything else is refused in one line (llama.cpp does not generate text with one
/// either).
fn encoder_use(cli: &Cli, model: &PlacedModel, mode: GpuMode) -> Result<()> {
    let arch = model.config.arch.name();
    let ngl = cli.n_gpu_layers.as_deref();
    if let (Some(n), Some(GpuLayers::All | GpuLayers::Count(1..))) =
        (ngl, ngl.and_then(GpuLayers::parse))
    {
        bail!("-ngl {n}: a {arch} encoder runs on the CPU only (leave -ngl out or give -ngl 0)");
    }
    if mode == GpuMode::Nvidia {
        bail!("--gpu nvidia: a {arch} encoder runs on the CPU only");
    }
    if cli.rpc.endpoints().map_err(anyhow::Error::msg)?.is_some() {
        bail!("--rpc: a {arch} encoder runs on the CPU only, not on RPC workers");
    }
    if !cli.lora.adapters.is_empty() {
        bail!("--lora: adapters for a {arch} encoder are not supported");
    }
    if cli.spec.model_draft.is_some() {
        bail!("--model-draft: a {arch} encoder generates no text to draft");
    }
    let server = cli.server
        || (!cli.cli
            && !cli.tokenize
            && !cli.bench
            && !cli.perplexity
            && !cli.chat
            && cli.prompt.is_none()
            && cli.file.is_none());
    if cli.tokenize || (server && cli.emb.embedding) {
        return Ok(());
    }
    bail!(
        "the model is a {arch} encoder: it computes embeddings and rerank scores, not text; \
         serve it with --embedding (or --rerank for a reranker)"
    )
}

fn run_perplexity(cli: &Cli, loaded: &Loaded, text: &str) -> Result<()> {
    let tokens = loaded.tokenizer.encode(text, true, false);
    let n_ctx = context_size(cli, &loaded.model);
    let bos = loaded
        .tokenizer
        .add_bos()
        .then(|| loaded.tokenizer.bos())
        .flatten();
    if tokens.len() >= 2 * n_ctx {
        eprintln!(
            "perplexity: tokenized {} tokens, {} chunks of {n_ctx}",
            tokens.len(),
            tokens.len() / n_ctx
        );
    }
    let r = perplexity(
        &loaded.model,
        &tokens,
        n_ctx,
        cli.forward_batch(),
        bos,
        &mut std::io::stdout(),
    )?;
    println!("Final estimate: PPL = {:.4} +/- {:.5}", r.ppl, r.ppl_err);
    Ok(())
}

fn run_generate(cli: &Cli, loaded: &Loaded, text: &str, mut clock: RunClock) -> Result<()> {
    let tok = &loaded.tokenizer;
    let prompt = tok.encode(text, true, true);
    let n_ctx = context_size(cli, &loaded.model);
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    if prompt.len() >= n_ctx {
        bail!(
            "the prompt is {} tokens long, more than the context of {n_ctx} allows (-c)",
            prompt.len()
        );
    }
    let mut trace = match &cli.trace_tokens {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p)
                .with_context(|| format!("cannot create trace file {}", p.display()))?,
        )),
        None => None,
    };
    let mut params = cli.sampling_params(cli.resolved_seed())?;
    if cli.compat.ignore_eos {
        // As llama.cpp: end-of-generation tokens are never sampled.
        let eog = tok.eog_ids().iter().map(|&id| (id, f32::NEG_INFINITY));
        params.logit_bias.extend(eog);
    }
    let mut sampler = Sampler::new(params, Arc::new(TokenVocab::new(tok)));
    let mut session = Session::try_new(&loaded.model, n_ctx, cli.forward_batch())?;
    session.context_shift = cli
        .context_shift
        .then(|| crate::engine::session::keep_tokens(cli.keep, &prompt, tok.bos()));
    let draft = match &cli.spec.model_draft {
        Some(name) => Some(
            load_model(name, None)
                .with_context(|| format!("cannot load the draft model {name}"))?,
        ),
        None => None,
    };
    let mut spec = crate::engine::speculative::setup::build(
        &cli.spec.options(),
        loaded,
        draft.as_ref(),
        n_ctx,
        cli.forward_batch(),
    )?;
    let logits = session.feed(&prompt, false)?;
    clock.mark_prompt(prompt.len());
    // The workers' traffic from here on is generation's (`--verbose` reports it per token).
    let traffic_before = crate::backend::rpc::total_traffic();
    let mut n_emitted = 0usize;
    let mut out = std::io::stdout().lock();
    let mut decoder = if cli.compat.special {
        StreamDecoder::showing_specials()
    } else {
        StreamDecoder::new()
    };
    let mut reverse_prompts = StopText::new(cli.compat.reverse_prompt.clone());
    let watch_reverse = !cli.compat.reverse_prompt.is_empty();
    let mut write_err = None;
    let on_token = |ev: &crate::engine::session::TokenEvent| {
        clock.mark_token();
        n_emitted += 1;
        if let Some(t) = trace.as_mut() {
            if let Err(e) = write_trace(t, tok, ev.id, ev.logits) {
                write_err = Some(e);
                return false;
            }
        }
        if !ev.is_eog {
            let text = decoder.push(tok, ev.id);
            if out
                .write_all(text.as_bytes())
                .and_then(|_| out.flush())
                .is_err()
            {
                return false;
            }
            if watch_reverse && reverse_prompts.push(&text).stopped.is_some() {
                return false;
            }
        }
        true
    };
    let ignore_eos = cli.compat.ignore_eos;
    let is_eog = |id| !ignore_eos && tok.is_eog(id);
    session.generate_with_drafts(
        logits,
        &mut sampler,
        cli.n_predict,
        is_eog,
        on_token,
        spec.as_mut(),
    )?;
    if let Some(spec) = spec.as_mut() {
        spec.finish()?;
    }
    let rest = decoder.flush();
    out.write_all(rest.as_bytes())?;
    out.flush()?;
    if let Some(t) = trace.as_mut() {
        t.flush()?;
    }
    if let Some(e) = write_err {
        return Err(e).context("cannot write the trace file");
    }
    if cli.verbose {
        eprintln!("\n{}", clock.report_now());
        let (sent, received) = crate::backend::rpc::total_traffic();
        let (sent, received) = (sent - traffic_before.0, received - traffic_before.1);
        if sent > 0 && n_emitted > 0 {
            let n = n_emitted as u64;
            eprintln!(
                "llamafile: RPC traffic: {} bytes sent, {} received per generated token ({n} tokens)",
                sent / n,
                received / n
            );
        }
        if let Some(spec) = &spec {
            eprintln!("llamafile: {}", spec.summary());
        }
    }
    Ok(())
}

/// One `--trace-tokens` line: the token, its text and the five highest logits.
fn write_trace(
    out: &mut impl Write,
    tok: &Tokenizer,
    id: u32,
    logits: &[f32],
) -> std::io::Result<()> {
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    let k = 5.min(idx.len());
    idx.select_nth_unstable_by(k - 1, |&a, &b| logits[b].total_cmp(&logits[a]));
    idx.truncate(k);
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    let top: Vec<(usize, f32)> = idx.iter().map(|&i| (i, logits[i])).collect();
    let piece = String::from_utf8_lossy(tok.token_to_piece(id, true)).into_owned();
    let line = serde_json::json!({ "id": id, "piece": piece, "top": top });
    writeln!(out, "{line}")
}
