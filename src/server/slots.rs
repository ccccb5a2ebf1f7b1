//! Slots: the server's parallel sequences, the scheduler's state. Each slot owns a [`Session`]
//! (its KV cache and the tokens that cache holds, so a new request whose prompt starts the same
//! way skips re-evaluating them) and, when speculating, its draft sources. Also the per-request
//! text state: streaming detokenization with stop sequences held back until they can no longer
//! match ([`StopText`]). What requests and their handlers exchange with the scheduler is
//! `protocol`'s.

use super::protocol::{Event, GenParams, Job, Progress, Stats};
use crate::engine::session::Session;
use crate::engine::speculative::Speculator;
use crate::engine::Budget;
use crate::sampling::logprobs::StepLogprobs;
use crate::sampling::{Sampler, TokenVocab};
use crate::stop_text::StopText;
use crate::tokenizer::{StreamDecoder, Tokenizer};
use std::sync::Arc;
use std::time::Instant;

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
    /// The id of the slot's last request (for `/slots`, as llama-server keeps its last task).
    pub last_task: Option<u64>,
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
            last_task: None,
            last_used: Instant::now(),
        }
    }

    /// Starts `job`, keeping the cached prefix it shares (at least one prompt token is always
    /// evaluated again, for its logits). `keep_on_shift`: the leading tokens a context shift
    /// keeps (`None`: a full context ends the request).
    pub fn start(&mut self, job: Job, vocab: &Arc<TokenVocab>, keep_on_shift: Option<usize>) {
        if self.session.lora != job.params.lora {
            // What the cache holds was computed with other adapters: none of it can be reused.
            self.session.truncate(0);
            self.session.lora = job.params.lora.clone();
        }
        let keep = if job.params.cache_prompt {
            let keep = self
                .session
                .keep_prefix(&job.prompt, job.prompt.len().saturating_sub(1));
            // Never part of an image: its rows are fed whole.
            let keep = crate::engine::media::before_image(&job.prompt, keep);
            self.session.truncate(keep);
            keep
        } else {
            self.session.truncate(0);
            0
        };
        self.session.context_shift = keep_on_shift;
        // Whole images of the prompt, for the context shift.
        self.session.image_spans = (job.params.media.as_ref())
            .map(|m| m.spans.clone())
            .unwrap_or_default();
        if let Some(spec) = self.spec.as_mut() {
            spec.restart();
        }
        self.last_params = Some(job.params.clone());
        self.last_task = Some(job.id);
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
