//! Slots: the server's parallel sequences. Each slot owns one KV sequence (its cache lives in
//! the scheduler's cache array at the slot's index) and remembers which tokens that cache
//! holds, so a new request whose prompt starts the same way skips re-evaluating them. Also the
//! per-request text state: streaming detokenization with stop sequences held back until they
//! can no longer match.

use crate::sampling::logprobs::StepLogprobs;
use crate::sampling::{Sampler, SamplingParams, TokenVocab};
use crate::stop_text::{find_stop, partial_stop};
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
}

/// Why generation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    /// An end-of-generation token.
    Eog,
    /// The token budget (`n_predict` / `max_tokens`).
    Length,
    /// The slot's context is full.
    ContextFull,
    /// A stop sequence appeared (it is not part of the text).
    StopWord(String),
}

impl Finish {
    /// OpenAI's `finish_reason`.
    pub fn openai(&self) -> &'static str {
        match self {
            Finish::Eog | Finish::StopWord(_) => "stop",
            Finish::Length | Finish::ContextFull => "length",
        }
    }

    /// llama.cpp's `stop_type`.
    pub fn stop_type(&self) -> &'static str {
        match self {
            Finish::Eog => "eos",
            Finish::StopWord(_) => "word",
            Finish::Length | Finish::ContextFull => "limit",
        }
    }
}

/// Figures reported when a request ends.
#[derive(Clone, Debug)]
pub struct Summary {
    pub finish: Finish,
    pub slot: usize,
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

/// What the scheduler tells a request's handler.
#[derive(Debug)]
pub enum Event {
    /// New text (complete UTF-8 characters, stop sequences withheld) and the tokens behind it.
    Text {
        text: String,
        tokens: Vec<u32>,
        /// One entry per token when log-probabilities were asked for.
        probs: Vec<StepLogprobs>,
    },
    Done(Summary),
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
    /// Decoded text not yet sent (it may be the start of a stop sequence).
    pub pending: String,
    pub pending_tokens: Vec<u32>,
    /// Log-probabilities of `pending_tokens` (when asked for).
    pub pending_probs: Vec<StepLogprobs>,
    /// The sampled token to feed next.
    pub next_token: Option<u32>,
    pub n_decoded: usize,
    /// Draft tokens verified for this request, and accepted.
    pub draft_n: usize,
    pub draft_n_accepted: usize,
    pub started: Instant,
    pub first_token: Option<Instant>,
}

/// One parallel sequence.
pub struct Slot {
    pub id: usize,
    /// Tokens whose keys and values are in this slot's cache, in order.
    pub tokens: Vec<u32>,
    pub active: Option<Active>,
    /// When the slot last finished a request (for least-recently-used choice).
    pub last_used: Instant,
}

impl Slot {
    pub fn new(id: usize) -> Slot {
        Slot {
            id,
            tokens: Vec::new(),
            active: None,
            last_used: Instant::now(),
        }
    }

    /// Length of the common prefix of the cached tokens and `prompt`.
    pub fn common_prefix(&self, prompt: &[u32]) -> usize {
        crate::generate::common_prefix(&self.tokens, prompt)
    }

    /// Starts `job`, keeping the cached prefix it shares (at least one prompt token is always
    /// evaluated again, for its logits). Returns how many cached tokens are kept.
    pub fn start(&mut self, job: Job, vocab: &Arc<TokenVocab>) -> usize {
        let keep = if job.params.cache_prompt {
            self.common_prefix(&job.prompt)
                .min(job.prompt.len().saturating_sub(1))
        } else {
            0
        };
        self.tokens.truncate(keep);
        let sampler = Sampler::new(job.params.sampling.clone(), vocab.clone());
        self.active = Some(Active {
            job,
            prompt_done: keep,
            n_cached: keep,
            sampler,
            decoder: StreamDecoder::new(),
            pending: String::new(),
            pending_tokens: Vec::new(),
            pending_probs: Vec::new(),
            next_token: None,
            n_decoded: 0,
            draft_n: 0,
            draft_n_accepted: 0,
            started: Instant::now(),
            first_token: None,
        });
        keep
    }
}

/// Picks the idle slot for a prompt: the longest cached prefix when `cache_prompt`, then the
/// least recently used.
pub fn pick_slot(slots: &[Slot], prompt: &[u32], cache_prompt: bool) -> Option<usize> {
    slots
        .iter()
        .filter(|s| s.active.is_none())
        .max_by_key(|s| {
            let prefix = if cache_prompt {
                s.common_prefix(prompt)
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
        self.pending.push_str(&piece);
        self.pending_tokens.push(id);
        let stops = &self.job.params.stop;
        if let Some((at, word)) = find_stop(&self.pending, stops) {
            let text = self.pending[..at].to_string();
            self.pending.clear();
            return TextStep::Stopped(text, std::mem::take(&mut self.pending_tokens), word);
        }
        let hold = partial_stop(&self.pending, stops);
        let send = self.pending.len() - hold;
        let text: String = self.pending.drain(..send).collect();
        let tokens = if hold == 0 {
            std::mem::take(&mut self.pending_tokens)
        } else {
            Vec::new()
        };
        TextStep::Send(text, tokens)
    }

    /// Everything still held back, at the end of generation.
    pub fn flush(&mut self) -> (String, Vec<u32>) {
        let rest = self.decoder.flush();
        self.pending.push_str(&rest);
        if let Some((at, _)) = find_stop(&self.pending, &self.job.params.stop) {
            self.pending.truncate(at);
        }
        (
            std::mem::take(&mut self.pending),
            std::mem::take(&mut self.pending_tokens),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_choice_prefers_cached_prefix_then_lru() {
        let mut slots: Vec<Slot> = (0..3).map(Slot::new).collect();
        slots[1].tokens = vec![1, 2, 3];
        slots[2].tokens = vec![1, 9];
        assert_eq!(pick_slot(&slots, &[1, 2, 3, 4], true), Some(1));
        // Without prefix reuse: the least recently used (slot 0 was created first).
        assert_eq!(pick_slot(&slots, &[1, 2, 3, 4], false), Some(0));
    }
}
