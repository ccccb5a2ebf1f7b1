//! Slots: the server's parallel sequences. Each slot owns a [`Session`] (its KV cache and the
//! tokens that cache holds, so a new request whose prompt starts the same way skips
//! re-evaluating them) and, when speculating, its draft sources. Also the per-request text
//! state: streaming detokenization with stop sequences held back until they can no longer match
//! ([`StopText`]).

use crate::engine::session::Session;
use crate::engine::speculative::Speculator;
use crate::engine::{Budget, StopReason};
use crate::sampling::logprobs::StepLogprobs;
use crate::sampling::{Sampler, SamplingParams, TokenVocab};
use crate::stop_text::StopText;
use crate::tokenizer::{StreamDecoder, Tokenizer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

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

/// A slot's request in progress.
pub struct Active {
    pub job: Job,
    /// Prompt tokens already in the cache.
    pub prompt_done: usize,
    pub n_cached: usize,
    pub sampler: Sampler,
    pub decoder: StreamDecoder,
    /// The request's stop sequences, holding back text that may be the start of one.
    pub stops: StopText,
    /// Tokens of text not yet sent.
    pub pending_tokens: Vec<u32>,
    /// Log-probabilities of `pending_tokens` (when asked for).
    pub pending_probs: Vec<StepLogprobs>,
    /// The log-probabilities of the token just sampled, until it joins `pending_tokens`.
    pub step_probs: Option<StepLogprobs>,
    /// The sampled token to feed next.
    pub next_token: Option<u32>,
    /// The request's token budget (`n_predict`), which ends it when spent.
    pub budget: Budget,
    pub n_decoded: usize,
    /// The text sent so far has a line break (`/slots`' `has_new_line`).
    pub has_new_line: bool,
    /// Draft tokens verified for this request, and accepted.
    pub draft_n: usize,
    pub draft_n_accepted: usize,
    pub started: Instant,
    pub first_token: Option<Instant>,
}

/// One parallel sequence.
pub struct Slot<'m> {
    pub id: usize,
    /// The slot's cache and the tokens whose keys and values it holds, in order.
    pub session: Session<'m>,
    /// The slot's draft sources, when speculating (a draft model keeps a cache per slot).
    pub spec: Option<Speculator<'m>>,
    pub active: Option<Active>,
    /// The settings of the slot's last request (for `/slots`).
    pub last_params: Option<GenParams>,
    /// When the slot last finished a request (for least-recently-used choice).
    pub last_used: Instant,
}

impl<'m> Slot<'m> {
    pub fn new(id: usize, session: Session<'m>, spec: Option<Speculator<'m>>) -> Slot<'m> {
        Slot {
            id,
            session,
            spec,
            active: None,
            last_params: None,
            last_used: Instant::now(),
        }
    }

    /// Starts `job`, keeping the cached prefix it shares (at least one prompt token is always
    /// evaluated again, for its logits). `keep_on_shift`: the leading tokens a context shift
    /// keeps (`None`: a full context ends the request).
    pub fn start(&mut self, job: Job, vocab: &Arc<TokenVocab>, keep_on_shift: Option<usize>) {
        let keep = if job.params.cache_prompt {
            self.session
                .keep_prefix(&job.prompt, job.prompt.len().saturating_sub(1))
        } else {
            self.session.truncate(0);
            0
        };
        self.session.context_shift = keep_on_shift;
        self.last_params = Some(job.params.clone());
        let sampler = Sampler::new(job.params.sampling.clone(), vocab.clone());
        let stops = StopText::new(job.params.stop.clone());
        let job_n_predict = job.params.n_predict;
        self.active = Some(Active {
            job,
            prompt_done: keep,
            n_cached: keep,
            sampler,
            decoder: StreamDecoder::new(),
            stops,
            pending_tokens: Vec::new(),
            pending_probs: Vec::new(),
            step_probs: None,
            next_token: None,
            budget: Budget::new(job_n_predict),
            n_decoded: 0,
            has_new_line: false,
            draft_n: 0,
            draft_n_accepted: 0,
            started: Instant::now(),
            first_token: None,
        });
    }

    /// The slot as [`pick_slot`] sees it, when it is idle.
    pub fn candidate(&self) -> Option<Candidate<'_>> {
        self.active.is_none().then_some(Candidate {
            id: self.id,
            tokens: &self.session.tokens,
            last_used: self.last_used,
        })
    }
}

/// An idle slot a request could go to.
pub struct Candidate<'a> {
    pub id: usize,
    /// The tokens its cache holds.
    pub tokens: &'a [u32],
    pub last_used: Instant,
}

/// Picks the idle slot for a prompt: the longest cached prefix when `cache_prompt`, then the
/// least recently used.
pub fn pick_slot<'a>(
    idle: impl IntoIterator<Item = Candidate<'a>>,
    prompt: &[u32],
    cache_prompt: bool,
) -> Option<usize> {
    idle.into_iter()
        .max_by_key(|s| {
            let prefix = if cache_prompt {
                crate::engine::session::common_prefix(s.tokens, prompt)
            } else {
                0
            };
            (prefix, std::cmp::Reverse(s.last_used))
        })
        .map(|s| s.id)
}

/// What happened to a slot's text after one more token.
pub enum TextStep {
    /// Text that can be sent now (may be empty), with its tokens.
    Send(String, Vec<u32>),
    /// A stop sequence was reached: the text before it is the last to send.
    Stopped(String, Vec<u32>, String),
}

impl Active {
    /// The request's counts and times at `now` (while the prompt is read, as far as it has
    /// been read, as llama-server counts them).
    pub fn stats(&self, now: Instant) -> Stats {
        let first = self.first_token.unwrap_or(now);
        Stats {
            n_prompt: self.prompt_done,
            n_cached: self.n_cached,
            n_predicted: self.n_decoded,
            prompt_ms: (first - self.started).as_secs_f64() * 1e3,
            predicted_ms: (now.max(first) - first).as_secs_f64() * 1e3,
            draft_n: self.draft_n,
            draft_n_accepted: self.draft_n_accepted,
        }
    }

    /// Tells the handler how far the prompt has been read, when it asked (`return_progress`).
    /// Best effort: a handler that is behind misses the event.
    pub fn send_progress(&self) {
        if self.job.params.return_progress {
            let _ = self.job.events.try_send(Event::Progress {
                progress: self.progress(),
                stats: self.stats(Instant::now()),
            });
        }
    }

    /// How far the prompt has been read.
    pub fn progress(&self) -> Progress {
        Progress {
            total: self.job.prompt.len(),
            cache: self.n_cached,
            processed: self.prompt_done,
            time_ms: self.started.elapsed().as_millis() as u64,
        }
    }

    /// The log-probabilities of tokens about to be sent (all pending ones once their tokens go).
    pub fn take_probs(&mut self, tokens_sent: bool) -> Vec<StepLogprobs> {
        if tokens_sent {
            std::mem::take(&mut self.pending_probs)
        } else {
            Vec::new()
        }
    }

    /// Adds a generated (non-end-of-generation) token to the text.
    pub fn push_token(&mut self, tok: &Tokenizer, id: u32) -> TextStep {
        let piece = self.decoder.push(tok, id);
        self.pending_tokens.push(id);
        let released = self.stops.push(&piece);
        if let Some(word) = released.stopped {
            return TextStep::Stopped(
                released.text,
                std::mem::take(&mut self.pending_tokens),
                word,
            );
        }
        let tokens = if released.whole {
            std::mem::take(&mut self.pending_tokens)
        } else {
            Vec::new()
        };
        TextStep::Send(released.text, tokens)
    }

    /// Everything still held back, at the end of generation.
    pub fn flush(&mut self) -> (String, Vec<u32>) {
        let text = self.stops.finish(&self.decoder.flush());
        (text, std::mem::take(&mut self.pending_tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_choice_prefers_cached_prefix_then_lru() {
        let t0 = Instant::now();
        let later = t0 + std::time::Duration::from_secs(1);
        let idle = || {
            [
                Candidate {
                    id: 0,
                    tokens: &[],
                    last_used: t0,
                },
                Candidate {
                    id: 1,
                    tokens: &[1, 2, 3],
                    last_used: later,
                },
                Candidate {
                    id: 2,
                    tokens: &[1, 9],
                    last_used: later,
                },
            ]
        };
        assert_eq!(pick_slot(idle(), &[1, 2, 3, 4], true), Some(1));
        // Without prefix reuse: the least recently used.
        assert_eq!(pick_slot(idle(), &[1, 2, 3, 4], false), Some(0));
        assert_eq!(pick_slot(Vec::new(), &[1], true), None);
    }
}
