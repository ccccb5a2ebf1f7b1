//! The forward pass: a batch of tokens (possibly from several sequences) through the model to
//! logits, read top to bottom: the embedding lookup on the host, the blocks on the backends of
//! the model's [`Placement`](crate::backend::Placement) in layer order (the hidden rows crossing
//! between them as host floats), then the output norm and the head. The per-block math belongs
//! to the backends (the CPU's is in `backend/cpu/`).

use super::{Config, Model};
use crate::backend::{BackendError, LayerCache, Pass, SeqCache};
use crate::ops::matmul;
use crate::ops::norm::rms_norm_rows;
use crate::ops::softcap::softcap_all;
use std::borrow::BorrowMut;

/// How much of the model a forward pass runs: all of it, or a cheaper approximation of it for
/// self-speculative drafting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardPlan {
    /// Blocks run before the output norm and head (fewer: an early-exit draft).
    pub n_layers: usize,
    /// Routed experts per token in MoE blocks instead of the model's k (0: only the shared
    /// experts); `None`: the model's own k.
    pub routed_experts: Option<usize>,
}

impl ForwardPlan {
    /// The whole model of `cfg`.
    pub fn full(cfg: &Config) -> ForwardPlan {
        ForwardPlan {
            n_layers: cfg.n_layer,
            routed_experts: None,
        }
    }
}

/// Tokens to run in one forward pass. Entry `i` is token `tokens[i]` at position `pos[i]` of
/// sequence `seq[i]` (an index into the caches); `logits[i]` asks for its output row.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub tokens: Vec<u32>,
    pub pos: Vec<usize>,
    pub seq: Vec<usize>,
    pub logits: Vec<bool>,
}

impl Batch {
    /// Consecutive tokens of sequence 0 starting at `start`; logits for the last one, or for all.
    pub fn sequence(tokens: &[u32], start: usize, all_logits: bool) -> Batch {
        let n = tokens.len();
        Batch {
            tokens: tokens.to_vec(),
            pos: (start..start + n).collect(),
            seq: vec![0; n],
            logits: (0..n).map(|i| all_logits || i + 1 == n).collect(),
        }
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True when the batch holds no token.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Number of output rows the forward pass will return.
    pub fn n_outputs(&self) -> usize {
        self.logits.iter().filter(|&&l| l).count()
    }
}

impl Model {
    /// Runs `batch`, storing keys and values in `caches[seq]`, and returns the logits of the
    /// entries that asked for them, `n_vocab` floats each, in batch order.
    ///
    /// Panics if a token id is out of the vocabulary or a position is beyond its cache: callers
    /// validate input first. Panics too if a backend fails (a device error); see
    /// [`Model::try_forward_plan`] for the error instead.
    /// `caches` holds the caches themselves or mutable references to them (the server's slots
    /// each own theirs).
    pub fn forward<C: BorrowMut<SeqCache>>(&self, batch: &Batch, caches: &mut [C]) -> Vec<f32> {
        self.forward_layers(batch, caches, self.config.n_layer)
    }

    /// [`Model::forward`] through the first `n_layers` blocks only, then the output norm and
    /// head: the early-exit draft of self-speculative decoding. The caches need only that many
    /// layers.
    pub fn forward_layers<C: BorrowMut<SeqCache>>(
        &self,
        batch: &Batch,
        caches: &mut [C],
        n_layers: usize,
    ) -> Vec<f32> {
        let plan = ForwardPlan {
            n_layers,
            ..ForwardPlan::full(&self.config)
        };
        self.forward_plan(batch, caches, plan)
    }

    /// [`Model::forward`] as `plan` says: fewer blocks, or fewer routed experts (drafts).
    pub fn forward_plan<C: BorrowMut<SeqCache>>(
        &self,
        batch: &Batch,
        caches: &mut [C],
        plan: ForwardPlan,
    ) -> Vec<f32> {
        self.try_forward_plan(batch, caches, plan)
            .unwrap_or_else(|e| panic!("forward pass failed: {e}"))
    }

    /// [`Model::forward_plan`], passing a backend's failure on.
    pub fn try_forward_plan<C: BorrowMut<SeqCache>>(
        &self,
        batch: &Batch,
        caches: &mut [C],
        plan: ForwardPlan,
    ) -> Result<Vec<f32>, BackendError> {
        let h = self.final_hidden(batch, caches, plan)?;
        self.output_head(&h)
    }

    /// The hidden states after the last block and the output norm, `n_embd` floats for each
    /// entry that asked for output, in batch order: what llama.cpp returns as a decoder model's
    /// token embeddings (its `result_norm`), before the output head. Caches fill as in
    /// [`Model::forward`], which this panics as.
    pub fn hidden_states<C: BorrowMut<SeqCache>>(
        &self,
        batch: &Batch,
        caches: &mut [C],
    ) -> Vec<f32> {
        self.try_hidden_states(batch, caches)
            .unwrap_or_else(|e| panic!("forward pass failed: {e}"))
    }

    /// [`Model::hidden_states`], passing a backend's failure on.
    pub fn try_hidden_states<C: BorrowMut<SeqCache>>(
        &self,
        batch: &Batch,
        caches: &mut [C],
    ) -> Result<Vec<f32>, BackendError> {
        self.final_hidden(batch, caches, ForwardPlan::full(&self.config))
    }

    /// The batch through the blocks (and experts) `plan` names, each range on its backend,
    /// then the output norm of the rows that asked for output.
    fn final_hidden<C: BorrowMut<SeqCache>>(
        &self,
        batch: &Batch,
        caches: &mut [C],
        plan: ForwardPlan,
    ) -> Result<Vec<f32>, BackendError> {
        let cfg = &self.config;
        let file = &*self.file;
        let n = batch.len();
        let e = cfg.n_embd;
        let mut x = vec![0f32; n * e];
        let embd = self.weights.token_embd.mat(file);
        for (row, &tok) in x.chunks_exact_mut(e).zip(&batch.tokens) {
            assert!(
                (tok as usize) < cfg.n_vocab,
                "token id {tok} out of vocabulary"
            );
            embd.dequantize_row(tok as usize, row);
            if let Some(s) = cfg.embed_scale {
                row.iter_mut().for_each(|v| *v *= s);
            }
        }
        for (stage, backend) in self.placement.stages().iter().enumerate() {
            let range = backend.layers();
            let layers = range.start..range.end.min(plan.n_layers);
            if layers.is_empty() {
                break;
            }
            // Each sequence's part for this backend: the `stage`th, made by it.
            let mut parts = Vec::with_capacity(caches.len());
            for c in caches.iter_mut() {
                let part: &mut dyn LayerCache = c
                    .borrow_mut()
                    .parts_mut()
                    .get_mut(stage)
                    .ok_or_else(|| BackendError::MissingLayers(layers.clone()))?
                    .as_mut();
                parts.push(part);
            }
            let pass = Pass {
                batch,
                layers,
                plan,
            };
            backend.run(self, &pass, &mut parts, &mut x)?;
        }

        let out_rows: Vec<usize> = (0..n).filter(|&i| batch.logits[i]).collect();
        let mut h = vec![0f32; out_rows.len() * e];
        for (dst, &i) in h.chunks_exact_mut(e).zip(&out_rows) {
            dst.copy_from_slice(&x[i * e..(i + 1) * e]);
        }
        rms_norm_rows(&mut h, &self.weights.output_norm, e, cfg.rms_eps);
        Ok(h)
    }

    /// Logits of output-normed hidden rows `h` (`n_embd` floats each): on the backend the
    /// placement names for the head, else on the host; the final soft-cap on the host.
    fn output_head(&self, h: &[f32]) -> Result<Vec<f32>, BackendError> {
        let cfg = &self.config;
        let n_rows = h.len() / cfg.n_embd;
        let mut logits = vec![0f32; n_rows * cfg.n_vocab];
        let on_backend = self
            .placement
            .head()
            .and_then(|b| b.output_head(self, h, &mut logits));
        match on_backend {
            Some(done) => done?,
            None => matmul(&self.weights.output.mat(&self.file), h, n_rows, &mut logits),
        }
        if let Some(cap) = cfg.final_softcap {
            softcap_all(&mut logits, cap);
        }
        Ok(logits)
    }
}
