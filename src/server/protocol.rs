//! The server's request protocol: what an HTTP handler hands the scheduler (a [`Job`] with its
//! [`GenParams`], a [`SlotAction`]) and what it hears back ([`Event`]s: text, prompt progress,
//! and the [`Summary`] with its stop reason and [`Stats`]), kept apart from the slots' state
//! (`slots`), as llama.cpp keeps its server tasks apart from its context.

use crate::engine::media::MediaPrompt;
use crate::engine::StopReason;
use crate::model::LoraMix;
use crate::sampling::logprobs::StepLogprobs;
use crate::sampling::SamplingParams;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

/// What a request asks of generation.
#[derive(Clone, Debug)]
pub struct GenParams {
    pub sampling: SamplingParams,
    /// Most tokens to generate (negative: until end of generation or a full context).
    pub n_predict: i64,
    pub stop: Vec<String>,
    /// Reuse the slot's cached prefix.
    pub cache_prompt: bool,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Report each token's log-probability and this many alternatives (`None`: no
    /// log-probabilities).
    pub n_probs: Option<usize>,
    /// Prompt tokens a context shift keeps (`n_keep`; `None`: the server's `--keep`).
    pub n_keep: Option<i64>,
    /// Probabilities after the sampler chain instead of the model's log-probabilities
    /// (llama-server's `post_sampling_probs`).
    pub post_sampling_probs: bool,
    /// Every streamed event carries the request's timings so far (`timings_per_token`).
    pub timings_per_token: bool,
    /// Send [`Event::Progress`] while the prompt is read (`return_progress`, streams only).
    pub return_progress: bool,
    /// The prompt's images, when it has any: the job's prompt then holds a media token at
    /// each of their positions, and the scheduler feeds their rows there.
    pub media: Option<Arc<MediaPrompt>>,
    /// The LoRA adapters' scales the request runs at (`None`: no adapter is loaded).
    pub lora: Option<LoraMix>,
    /// What llama-server's `generation_settings` shows of the request beyond its sampling.
    pub shown: Shown,
}

/// The parts of a request's settings that llama-server shows in `generation_settings` and
/// `/slots` but that generation itself does not read: how the reply is parsed and the
/// grammar's text.
#[derive(Clone, Debug)]
pub struct Shown {
    /// The request streams its answer.
    pub stream: bool,
    /// llama-server's name for how the reply is parsed: `Content-only` (completions, the
    /// text as generated) or `peg-native` (chat, read in the template's own format).
    pub chat_format: &'static str,
    /// `none`, `deepseek` or `deepseek-legacy`: where thoughts go.
    pub reasoning_format: &'static str,
    /// The text the template adds to open the assistant's turn (chat; empty otherwise).
    pub generation_prompt: String,
    /// The GBNF text of the request's grammar (empty: none, or the command line's).
    pub grammar: String,
    /// The adapters the request's own `lora` field lists, by id, with their scales.
    pub lora: Vec<(usize, f32)>,
}

impl Default for Shown {
    fn default() -> Shown {
        Shown {
            stream: false,
            chat_format: "Content-only",
            reasoning_format: "none",
            generation_prompt: String::new(),
            grammar: String::new(),
            lora: Vec::new(),
        }
    }
}

/// A stop reason as the APIs name it.
pub trait FinishNames {
    /// OpenAI's `finish_reason`.
    fn openai(&self) -> &'static str;
    /// llama.cpp's `stop_type`.
    fn stop_type(&self) -> &'static str;
}

impl FinishNames for StopReason {
    fn openai(&self) -> &'static str {
        match self {
            StopReason::EndOfGeneration | StopReason::StopWord(_) | StopReason::Cancelled => "stop",
            StopReason::Length | StopReason::ContextFull => "length",
        }
    }

    fn stop_type(&self) -> &'static str {
        match self {
            StopReason::EndOfGeneration => "eos",
            StopReason::StopWord(_) => "word",
            StopReason::Length | StopReason::ContextFull => "limit",
            StopReason::Cancelled => "none",
        }
    }
}

/// Figures reported when a request ends.
#[derive(Clone, Debug)]
pub struct Summary {
    pub finish: StopReason,
    pub slot: usize,
    pub stats: Stats,
    /// Tokens in the slot's cache when the request ended: its prompt and every generated token
    /// fed back (llama-server's `tokens_cached`).
    pub n_tokens_cached: usize,
}

/// A request's counts and times so far (llama-server's `timings`).
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub n_prompt: usize,
    /// Prompt tokens found in the slot's cache and not evaluated again.
    pub n_cached: usize,
    pub n_predicted: usize,
    pub prompt_ms: f64,
    pub predicted_ms: f64,
    /// Draft tokens proposed for this request, and how many the model agreed with.
    pub draft_n: usize,
    pub draft_n_accepted: usize,
}

/// How far a request's prompt has been read (llama-server's `prompt_progress`).
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Prompt tokens.
    pub total: usize,
    /// Of them, found in the slot's cache.
    pub cache: usize,
    /// Of them, in the cache now (cached or evaluated).
    pub processed: usize,
    /// Since the request took its slot.
    pub time_ms: u64,
}

/// What the scheduler tells a request's handler.
#[derive(Debug)]
pub enum Event {
    /// New text (complete UTF-8 characters, stop sequences withheld) and the tokens behind it.
    Text {
        text: String,
        tokens: Vec<u32>,
        /// One entry per token when log-probabilities were asked for.
        probs: Vec<StepLogprobs>,
        stats: Stats,
    },
    /// More of the prompt was read (only when the request asked for `return_progress`).
    Progress {
        progress: Progress,
        stats: Stats,
    },
    Done(Summary),
    /// The model's backend failed (a device, an RPC worker): the request ends with this error
    /// (503, naming the worker) instead of a summary.
    Failed(crate::server::error::ApiError),
}

/// What a `POST /slots/{id}?action=...` does to an idle slot.
#[derive(Clone, Debug)]
pub enum SlotOp {
    /// Write the slot's tokens and cache to this file.
    Save(std::path::PathBuf),
    /// Replace them with this file's.
    Restore(std::path::PathBuf),
    /// Forget them.
    Erase,
}

/// A slot operation, run by the scheduler once the slot is idle (as llama-server defers it).
pub struct SlotAction {
    pub slot: usize,
    pub op: SlotOp,
    pub reply: mpsc::Sender<Result<SlotDone, super::error::ApiError>>,
}

/// What a slot operation did.
#[derive(Clone, Copy, Debug)]
pub struct SlotDone {
    /// Tokens saved, restored or erased.
    pub n_tokens: usize,
    /// Bytes written or read (0 for an erase).
    pub n_bytes: u64,
    pub ms: f64,
}

/// A request waiting for or occupying a slot.
pub struct Job {
    pub prompt: Vec<u32>,
    pub params: GenParams,
    /// Bounded ([`EVENT_BUFFER`](super::scheduler::EVENT_BUFFER)): a handler that falls that far behind (its client stopped
    /// reading) has its job cancelled rather than the scheduler waiting or buffering on.
    pub events: mpsc::SyncSender<Event>,
    pub cancel: Arc<AtomicBool>,
    pub id: u64,
}

impl Job {
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}
