//! One sequence and its KV cache ([`Session`]), the type the CLI, `--chat`, draft models and
//! the server's slots all use: prefill in batches, the decode loop (until end-of-generation,
//! the token budget or a full context, reporting each token as it is chosen), draft
//! verification, and the context shift that makes room when the context fills. The server
//! stages several sessions' tokens into one batch ([`Session::stage`]) and verifies each
//! session's rows with the same [`Session::verify`] the decode loop uses.

use super::decode::{Budget, StopReason};
use crate::backend::{BackendError, SeqCache};
use crate::backend::{KvCache, KvStateError};
use crate::engine::speculative::Speculator;
use crate::engine::PlacedModel;
use crate::model::{Batch, ForwardPlan, LoraMix};
use crate::sampling::Sampler;
use std::ops::{ControlFlow, Range};

/// Context shift of one sequence (`tokens`, whose keys and values are in `cache`): the first
/// `keep` tokens stay, the older half of the others goes, and the rest move down; an image's
/// positions (its media tokens) go or stay together. False when nothing could be dropped; a
/// backend's failure (a device, an RPC worker) is passed on.
pub fn shift_context(
    model: &PlacedModel,
    cache: &mut SeqCache,
    tokens: &mut Vec<u32>,
    keep: usize,
) -> Result<bool, BackendError> {
    shift_context_images(model, cache, tokens, &mut Vec::new(), keep)
}

/// [`shift_context`] of a sequence whose whole images (markers, tiles and overview) take the
/// positions `image_spans`: each is kept or dropped whole, and the spans follow the shift.
pub fn shift_context_images(
    model: &PlacedModel,
    cache: &mut SeqCache,
    tokens: &mut Vec<u32>,
    image_spans: &mut Vec<Range<usize>>,
    keep: usize,
) -> Result<bool, BackendError> {
    // An image stays whole (its markers, tiles and overview too): kept with the prefix, or
    // dropped from its first position to its last.
    let (keep, discard) = super::media::shift_cut(tokens, image_spans, keep);
    if discard == 0 {
        return Ok(false);
    }
    model.try_shift_cache(cache, keep, discard)?;
    tokens.drain(keep..keep + discard);
    super::media::shift_spans(image_spans, keep, discard);
    Ok(true)
}

/// Length of the common prefix of `a` and `b`.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Leading tokens a context shift keeps for `prompt`, as llama.cpp counts `--keep`/`n_keep`:
/// that many prompt tokens after its BOS, or the whole prompt for -1 (or more than it has).
pub fn keep_tokens(n_keep: i64, prompt: &[u32], bos: Option<u32>) -> usize {
    let has_bos = bos.is_some_and(|b| prompt.first() == Some(&b));
    if n_keep < 0 || n_keep as usize > prompt.len() {
        prompt.len()
    } else {
        (n_keep as usize + has_bos as usize).min(prompt.len())
    }
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
    pub model: &'m PlacedModel,
    /// Keys and values of `tokens`, one part per backend of the model's placement.
    pub cache: SeqCache,
    pub tokens: Vec<u32>,
    /// Largest number of tokens fed to one forward pass.
    pub n_batch: usize,
    /// What each forward pass runs: the whole model, or a self-speculative draft's part of it.
    plan: ForwardPlan,
    /// Context shift when the context fills: keep this many leading tokens, drop half of the
    /// rest (`--context-shift`, `--keep`). `None`: a full context ends generation.
    pub context_shift: Option<usize>,
    /// The LoRA adapters' scales of this sequence's passes (a server request's `lora`);
    /// `None`: the model's own (`--lora`). Its cache holds what they computed: change it only
    /// with the cache emptied.
    pub lora: Option<LoraMix>,
    /// The positions of each whole image among `tokens` (markers, tiles and overview), set by
    /// whoever feeds a prompt with images; a context shift keeps or drops each whole.
    pub image_spans: Vec<Range<usize>>,
    /// M-RoPE models (Qwen2-VL): for each image in `tokens`, the position after its rows and
    /// how many fewer rotary positions than rows it takes (mtmd advances the position by the
    /// longer side of its grid, not by its row count). The text after it is rotated for its
    /// position less the sum of the gaps before it.
    pub rope_gaps: Vec<(usize, usize)>,
}

impl<'m> Session<'m> {
    /// An empty session with a cache of `n_ctx` positions. Panics if a backend cannot make its
    /// part of the cache; see [`Session::try_new`].
    pub fn new(model: &'m PlacedModel, n_ctx: usize, n_batch: usize) -> Session<'m> {
        Session::with_layers(model, n_ctx, n_batch, model.config.n_layer)
    }

    /// [`Session::new`], passing a backend's failure to make its part of the cache on (device
    /// memory, an RPC worker out of memory or gone).
    pub fn try_new(
        model: &'m PlacedModel,
        n_ctx: usize,
        n_batch: usize,
    ) -> Result<Session<'m>, BackendError> {
        Session::try_with_plan(model, n_ctx, n_batch, ForwardPlan::full(&model.config))
    }

    /// A session that runs only the first `n_layers` blocks of `model` (an early-exit draft).
    pub fn with_layers(
        model: &'m PlacedModel,
        n_ctx: usize,
        n_batch: usize,
        n_layers: usize,
    ) -> Session<'m> {
        let plan = ForwardPlan {
            n_layers,
            ..ForwardPlan::full(&model.config)
        };
        Session::with_plan(model, n_ctx, n_batch, plan)
    }

    /// A session whose forward passes follow `plan` (a self-speculative draft). Panics as
    /// [`Session::new`] does.
    pub fn with_plan(
        model: &'m PlacedModel,
        n_ctx: usize,
        n_batch: usize,
        plan: ForwardPlan,
    ) -> Session<'m> {
        Session::try_with_plan(model, n_ctx, n_batch, plan)
            .unwrap_or_else(|e| panic!("cannot make a KV cache: {e}"))
    }

    /// [`Session::with_plan`], passing a backend's failure on.
    pub fn try_with_plan(
        model: &'m PlacedModel,
        n_ctx: usize,
        n_batch: usize,
        plan: ForwardPlan,
    ) -> Result<Session<'m>, BackendError> {
        let n_layers = plan.n_layers.clamp(1, model.config.n_layer);
        Ok(Session {
            model,
            cache: model.try_new_cache_layers(n_ctx, n_layers)?,
            tokens: Vec::new(),
            n_batch: n_batch.max(1),
            plan: ForwardPlan { n_layers, ..plan },
            context_shift: None,
            lora: None,
            image_spans: Vec::new(),
            rope_gaps: Vec::new(),
        })
    }

    /// The adapters' scales this session's passes use.
    pub fn lora(&self) -> &LoraMix {
        self.lora.as_ref().unwrap_or(self.model.lora_mix())
    }

    /// Forgets every token after the first `keep`.
    pub fn truncate(&mut self, keep: usize) {
        self.image_spans.retain(|s| s.end <= keep);
        self.rope_gaps.retain(|&(end, _)| end <= keep);
        self.tokens.truncate(keep);
        self.cache.truncate(keep);
    }

    /// Keeps the longest prefix the session shares with `tokens`, but at most `at_most`
    /// tokens, and forgets the rest; returns how many were kept.
    pub fn keep_prefix(&mut self, tokens: &[u32], at_most: usize) -> usize {
        let keep = common_prefix(&self.tokens, tokens).min(at_most);
        self.truncate(keep);
        keep
    }

    /// Feeds `tokens` after the ones already in the session and returns the logits after the
    /// last one (or every token's logits, `n_vocab` each, if `all_logits`). A backend's failure
    /// (a device, an RPC worker) is passed on; the session then holds the tokens fed before
    /// the failing batch.
    pub fn feed(&mut self, tokens: &[u32], all_logits: bool) -> Result<Vec<f32>, BackendError> {
        let mut out = Vec::new();
        for chunk in tokens.chunks(self.n_batch) {
            let mut batch = Batch::sequence(chunk, self.tokens.len(), all_logits);
            if !self.rope_gaps.is_empty() {
                let p0 = self.rope_pos(self.tokens.len());
                batch.rope_pos = (0..chunk.len() as i64).map(|i| [p0 + i; 4]).collect();
            }
            let lora = self.lora.as_ref().unwrap_or(self.model.lora_mix());
            let logits = self.model.try_forward_mix(
                &batch,
                std::slice::from_mut(&mut self.cache),
                self.plan,
                lora,
            )?;
            self.tokens.extend_from_slice(chunk);
            if all_logits {
                out.extend_from_slice(&logits);
            } else {
                out = logits;
            }
        }
        Ok(out)
    }

    /// The rotary position of the text token at `slot` (after the session's images, see
    /// [`Session::rope_gaps`]).
    pub fn rope_pos(&self, slot: usize) -> i64 {
        let gap: usize = (self.rope_gaps.iter())
            .filter(|&&(end, _)| end <= slot)
            .map(|&(_, g)| g)
            .sum();
        (slot - gap) as i64
    }

    /// Room left in the context.
    pub fn remaining(&self) -> usize {
        self.cache.n_ctx() - self.tokens.len()
    }

    /// Frees room by a context shift if the context is full and shifting is on: the first
    /// `keep` tokens stay, half of the others (the oldest) go. False when no room could be made;
    /// a backend's failure in the shift is passed on.
    pub fn make_room(&mut self) -> Result<bool, BackendError> {
        if self.remaining() > 0 {
            return Ok(true);
        }
        let Some(keep) = self.context_shift else {
            return Ok(false);
        };
        if !self.rope_gaps.is_empty() {
            // The text after an M-RoPE image is rotated for fewer positions than it sits at;
            // llama.cpp does not shift a context holding images at all.
            return Ok(false);
        }
        let (cache, spans) = (&mut self.cache, &mut self.image_spans);
        shift_context_images(self.model, cache, &mut self.tokens, spans, keep)
    }

    /// Samples up to `n_predict` tokens (negative: until end or full context) starting from
    /// `logits`, calling `on_token` for each; `on_token` returning false cancels. A backend's
    /// failure (a device, an RPC worker) ends generation with the error.
    pub fn generate(
        &mut self,
        logits: Vec<f32>,
        sampler: &mut Sampler,
        n_predict: i64,
        is_eog: impl Fn(u32) -> bool,
        on_token: impl FnMut(&TokenEvent) -> bool,
    ) -> Result<StopReason, BackendError> {
        self.generate_with_drafts(logits, sampler, n_predict, is_eog, on_token, None)
    }

    /// [`Session::generate`] with speculation: after each emitted token, `spec` may draft the
    /// next ones, and the model runs once over the token and its draft; [`Session::verify`]
    /// then keeps the drafted tokens the sampler agrees with. Same events and stop reasons;
    /// since every emitted token is a sample of the model, greedy or seeded output is the same
    /// as without drafts.
    pub fn generate_with_drafts(
        &mut self,
        logits: Vec<f32>,
        sampler: &mut Sampler,
        n_predict: i64,
        is_eog: impl Fn(u32) -> bool,
        mut on_token: impl FnMut(&TokenEvent) -> bool,
        mut spec: Option<&mut Speculator>,
    ) -> Result<StopReason, BackendError> {
        let mut budget = Budget::new(n_predict);
        if budget.exhausted() {
            return Ok(StopReason::Length);
        }
        // Logits after each token of the last pass: its first token, then its draft.
        let mut rows = logits;
        let mut feed: Vec<u32> = Vec::new();
        loop {
            let draft = feed.get(1..).unwrap_or_default();
            let step = self.step(&rows, draft, &mut budget, |row, history| {
                let id = sampler.sample(row, history);
                let is_eog = is_eog(id);
                if !on_token(&TokenEvent {
                    id,
                    logits: row,
                    is_eog,
                }) {
                    return ControlFlow::Break(StopReason::Cancelled);
                }
                if is_eog {
                    return ControlFlow::Break(StopReason::EndOfGeneration);
                }
                ControlFlow::Continue(id)
            })?;
            if let Some(s) = spec.as_deref_mut() {
                s.accept(step.accepted);
            }
            let id = match step.next {
                ControlFlow::Continue(id) => id,
                ControlFlow::Break(reason) => return Ok(reason),
            };
            feed = self.next_feed(spec.as_deref_mut(), id, &budget);
            rows = self.feed(&feed, feed.len() > 1)?;
        }
    }

    /// A draft from `spec` to feed after `next` (sampled, not yet fed): at most `budget`
    /// tokens, and no more than fit in the context after `next`.
    pub fn draft_after(&self, spec: &mut Speculator, next: u32, budget: usize) -> Vec<u32> {
        let room = self.remaining().saturating_sub(1).min(budget);
        let mut draft = spec.draft(&self.tokens, next, room);
        // An image's positions are not tokens that can be drafted.
        if let Some(i) = draft.iter().position(|&t| super::media::is_media_token(t)) {
            draft.truncate(i);
        }
        if !draft.is_empty() {
            spec.stats.steps += 1;
            spec.stats.drafted += draft.len();
        }
        draft
    }

    /// Draft verification, after a pass that fed a token and then `draft` (the session's last
    /// tokens), with `rows` the logits after each of them. `sample(row, history)` takes each
    /// row in turn (`history`: the tokens before it) and returns the token it chose, or
    /// `Break` to stop there. Drafted tokens are kept while they equal what was chosen; the
    /// session forgets the rest, so it then holds exactly the accepted tokens.
    pub fn verify<B>(
        &mut self,
        rows: &[f32],
        draft: &[u32],
        mut sample: impl FnMut(&[f32], &[u32]) -> ControlFlow<B, u32>,
    ) -> Verified<B> {
        let n_vocab = self.model.config.n_vocab;
        debug_assert_eq!(rows.len(), (draft.len() + 1) * n_vocab);
        let base = self.tokens.len() - draft.len();
        let row = |i: usize| &rows[i * n_vocab..(i + 1) * n_vocab];
        for (i, &d) in draft.iter().enumerate() {
            let next = sample(row(i), &self.tokens[..base + i]);
            if !matches!(next, ControlFlow::Continue(id) if id == d) {
                self.truncate(base + i);
                return Verified { accepted: i, next };
            }
        }
        let n = draft.len();
        Verified {
            accepted: n,
            next: sample(row(n), &self.tokens[..base + n]),
        }
    }

    /// Adds `tokens` after the session's own to `batch` as sequence `seq`, for a forward pass
    /// the caller runs over several sessions' caches; `logits(k)` says whether the `k`th asks
    /// for its output row.
    pub fn stage(
        &mut self,
        tokens: &[u32],
        seq: usize,
        batch: &mut Batch,
        logits: impl Fn(usize) -> bool,
    ) {
        for (k, &t) in tokens.iter().enumerate() {
            batch.tokens.push(t);
            if !self.rope_gaps.is_empty() || !batch.rope_pos.is_empty() {
                // Entries staged before without M-RoPE positions had plain ones.
                let have = batch.rope_pos.len();
                batch
                    .rope_pos
                    .extend(batch.pos[have..].iter().map(|&p| [p as i64; 4]));
                batch.rope_pos.push([self.rope_pos(self.tokens.len()); 4]);
            }
            batch.pos.push(self.tokens.len());
            batch.seq.push(seq);
            batch.logits.push(logits(k));
            self.tokens.push(t);
        }
    }
}

/// Why a session's saved state could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SessionStateError {
    #[error(transparent)]
    Cache(#[from] KvStateError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("{n_tokens} tokens but {n_cached} cached positions")]
    Mismatch { n_tokens: usize, n_cached: usize },
    #[error("token id {0} is outside the vocabulary")]
    Token(u32),
}

impl<'m> Session<'m> {
    /// Writes the session's tokens (a little-endian u64 count, then u32 ids) and its cache,
    /// each backend's part copied to the host and written in layer order
    /// ([`KvCache::write_to`]). Returns the bytes written.
    pub fn write_state(&self, w: &mut impl std::io::Write) -> std::io::Result<u64> {
        if !self.rope_gaps.is_empty() {
            return Err(std::io::Error::other(
                "the sequence holds an image of an M-RoPE model (Qwen2-VL), whose positions a \
                 saved state does not keep",
            ));
        }
        w.write_all(&(self.tokens.len() as u64).to_le_bytes())?;
        let ids: Vec<u8> = self.tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        w.write_all(&ids)?;
        let mut n = 8 + ids.len() as u64;
        for part in self.cache.parts() {
            let host = part.to_host().map_err(std::io::Error::other)?;
            n += host.write_to(w)?;
        }
        Ok(n)
    }

    /// Replaces the session's tokens and cache with what [`Session::write_state`] wrote (the
    /// cache's shape and size are checked, and every id against the vocabulary). Returns how
    /// many bytes were read. On an error the session is left empty.
    pub fn read_state(&mut self, r: &mut impl std::io::Read) -> Result<u64, SessionStateError> {
        self.truncate(0);
        let result = self.read_state_into(r);
        if result.is_err() {
            self.truncate(0);
        }
        result
    }

    fn read_state_into(&mut self, r: &mut impl std::io::Read) -> Result<u64, SessionStateError> {
        let mut long = [0u8; 8];
        r.read_exact(&mut long).map_err(KvStateError::from)?;
        let n = usize::try_from(u64::from_le_bytes(long)).unwrap_or(usize::MAX);
        let n_ctx = self.cache.n_ctx();
        if n > n_ctx {
            return Err(KvStateError::TooLong { len: n, n_ctx }.into());
        }
        let mut ids = vec![0u8; n * 4];
        r.read_exact(&mut ids).map_err(KvStateError::from)?;
        let n_vocab = self.model.config.n_vocab;
        let tokens: Vec<u32> = ids
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        // Media tokens name the images whose rows the cache holds.
        let bad = tokens
            .iter()
            .find(|&&t| t as usize >= n_vocab && !super::media::is_media_token(t));
        if let Some(&bad) = bad {
            return Err(SessionStateError::Token(bad));
        }
        let mut read = 0;
        for part in self.cache.parts_mut() {
            let mut host = KvCache::typed(
                part.layers(),
                part.n_ctx(),
                self.model.config.kv_dim(),
                self.model.kv_types(),
            );
            read += host.read_from(r)?;
            part.load_host(&host)?;
        }
        if self.cache.len() != tokens.len() {
            return Err(SessionStateError::Mismatch {
                n_tokens: tokens.len(),
                n_cached: self.cache.len(),
            });
        }
        self.tokens = tokens;
        // Whole images are known again when the next prompt is fed.
        self.image_spans.clear();
        self.rope_gaps.clear();
        Ok(8 + ids.len() as u64 + read)
    }
}

/// What [`Session::verify`] made of one pass's output rows.
#[derive(Debug, PartialEq, Eq)]
pub struct Verified<B> {
    /// Drafted tokens equal to what was chosen (they stay in the session).
    pub accepted: usize,
    /// `Continue(id)`: the token chosen after them, to feed next; `Break`: the caller stopped.
    pub next: ControlFlow<B, u32>,
}
