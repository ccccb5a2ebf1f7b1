//! Prefill and the decode loop for one sequence: feeds the prompt as batches, then samples token
//! after token until end-of-generation, the token budget or the context is exhausted, reporting
//! each token to the caller as it is chosen.

use crate::kv_cache::KvCache;
use crate::model::{Batch, Model};
use crate::sampling::Sampler;

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    EndOfGeneration,
    /// The requested number of tokens was generated.
    Length,
    /// The context window is full.
    ContextFull,
    /// The caller asked to stop.
    Cancelled,
}

/// What the decode loop tells its caller about each generated token.
pub struct TokenEvent<'a> {
    pub id: u32,
    /// The logits the token was sampled from.
    pub logits: &'a [f32],
    pub is_eog: bool,
}

/// A sequence being generated: the model, its cache and the tokens so far.
pub struct Session<'m> {
    pub model: &'m Model,
    pub cache: KvCache,
    pub tokens: Vec<u32>,
    /// Largest number of tokens fed to one forward pass.
    pub n_batch: usize,
    /// Blocks each forward pass runs (all of them, or fewer for an early-exit draft).
    n_layers: usize,
}

impl<'m> Session<'m> {
    /// An empty session with a cache of `n_ctx` positions.
    pub fn new(model: &'m Model, n_ctx: usize, n_batch: usize) -> Session<'m> {
        Session::with_layers(model, n_ctx, n_batch, model.config.n_layer)
    }

    /// A session that runs only the first `n_layers` blocks of `model` (an early-exit draft).
    pub fn with_layers(
        model: &'m Model,
        n_ctx: usize,
        n_batch: usize,
        n_layers: usize,
    ) -> Session<'m> {
        let n_layers = n_layers.clamp(1, model.config.n_layer);
        Session {
            model,
            cache: model.new_cache_layers(n_ctx, n_layers),
            tokens: Vec::new(),
            n_batch: n_batch.max(1),
            n_layers,
        }
    }

    /// Forgets every token after the first `keep`.
    pub fn truncate(&mut self, keep: usize) {
        self.tokens.truncate(keep);
        self.cache.truncate(keep);
    }

    /// Feeds `tokens` after the ones already in the session and returns the logits after the
    /// last one (or every token's logits, `n_vocab` each, if `all_logits`).
    pub fn feed(&mut self, tokens: &[u32], all_logits: bool) -> Vec<f32> {
        let mut out = Vec::new();
        for chunk in tokens.chunks(self.n_batch) {
            let batch = Batch::sequence(chunk, self.tokens.len(), all_logits);
            let logits = self.model.forward_layers(
                &batch,
                std::slice::from_mut(&mut self.cache),
                self.n_layers,
            );
            self.tokens.extend_from_slice(chunk);
            if all_logits {
                out.extend_from_slice(&logits);
            } else {
                out = logits;
            }
        }
        out
    }

    /// Room left in the context.
    pub fn remaining(&self) -> usize {
        self.cache.n_ctx() - self.tokens.len()
    }

    /// Samples up to `n_predict` tokens (negative: until end or full context) starting from
    /// `logits`, calling `on_token` for each; `on_token` returning false cancels.
    pub fn generate(
        &mut self,
        mut logits: Vec<f32>,
        sampler: &mut Sampler,
        n_predict: i64,
        is_eog: impl Fn(u32) -> bool,
        mut on_token: impl FnMut(&TokenEvent) -> bool,
    ) -> StopReason {
        let mut produced: i64 = 0;
        loop {
            if n_predict >= 0 && produced >= n_predict {
                return StopReason::Length;
            }
            let id = sampler.sample(&logits, &self.tokens);
            produced += 1;
            let eog = is_eog(id);
            if !on_token(&TokenEvent {
                id,
                logits: &logits,
                is_eog: eog,
            }) {
                return StopReason::Cancelled;
            }
            if eog {
                return StopReason::EndOfGeneration;
            }
            if self.remaining() == 0 {
                return StopReason::ContextFull;
            }
            logits = self.feed(&[id], false);
        }
    }
}
