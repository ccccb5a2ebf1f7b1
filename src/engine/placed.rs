//! A model placed on backends ([`PlacedModel`]): its data (`model::Model`, which it derefs
//! to) and the [`Placement`] of its blocks, and the forward pass that turns a batch of tokens
//! into logits through them, read top to bottom: the embedding lookup on the host, the blocks
//! on the placement's backends in layer order (the hidden rows crossing between them as host
//! floats), then the output norm and the head. The per-block math belongs to the backends (the
//! CPU's is in `backend/cpu/`). Caches and the context shift are made and done here, each part
//! by its backend.

use crate::backend::{
    BackendError, KvTypeError, KvTypes, LayerCache, LoraAdapters, Pass, Placement, PlacementError,
    SeqCache,
};
use crate::gguf::GgufFile;
use crate::model::{Batch, ForwardPlan, LoraAdapter, LoraError, LoraMix, Model, ModelError};
use crate::ops::matmul;
use crate::ops::norm::rms_norm_rows;
use crate::ops::softcap::softcap_all;
use std::borrow::BorrowMut;
use std::ops::Deref;
use std::sync::Arc;

/// Why a model could not be loaded and placed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Placement(#[from] PlacementError),
}

/// A model ready to run: its data and which backend runs which blocks.
pub struct PlacedModel {
    model: Model,
    /// Which backend runs which blocks (see [`PlacedModel::set_placement`]).
    placement: Placement,
    /// How caches made from now on store keys and values (see [`PlacedModel::set_kv_types`]).
    kv_types: KvTypes,
    /// The adapters' scales of a forward pass that names none (see [`PlacedModel::add_lora`]).
    lora_mix: LoraMix,
}

impl Deref for PlacedModel {
    type Target = Model;

    fn deref(&self) -> &Model {
        &self.model
    }
}

impl PlacedModel {
    /// Reads the configuration and locates every weight of `file`. Every block runs on the
    /// CPU, or on the CPU backends of the debug split `LLAMAFILE_SPLIT_LAYERS` when it is set
    /// (see [`Placement::from_env`]).
    pub fn load(file: Arc<GgufFile>) -> Result<PlacedModel, LoadError> {
        let model = Model::load(file)?;
        let placement = Placement::from_env(model.config.n_layer)?;
        Ok(PlacedModel {
            model,
            placement,
            kv_types: KvTypes::default(),
            lora_mix: LoraMix::default(),
        })
    }

    /// The model's data, as backends read it.
    pub fn data(&self) -> &Model {
        &self.model
    }

    /// Which backend runs which blocks.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Runs the blocks on `placement`'s backends from now on (before any cache is made: caches
    /// made earlier belong to the old backends). Refused unless it covers this model's blocks.
    pub fn set_placement(&mut self, placement: Placement) -> Result<(), PlacementError> {
        let n = placement.stages().last().map_or(0, |b| b.layers().end);
        if n != self.config.n_layer {
            return Err(PlacementError::Coverage {
                got: n,
                want: self.config.n_layer,
            });
        }
        self.placement = placement;
        Ok(())
    }

    /// Stores keys and values of the caches made from now on as `types` (`-ctk`/`-ctv`).
    /// Refused, in one line, when a type's block does not divide the head size, or when types
    /// other than f16 are asked of a placement with blocks off the CPU (the device kernels read
    /// f16 rows only); call it after [`PlacedModel::set_placement`].
    pub fn set_kv_types(&mut self, types: KvTypes) -> Result<(), KvTypeError> {
        types.check_model(&self.model)?;
        if !types.is_default() {
            if let Some(b) = self.placement.stages().iter().find(|b| b.name() != "cpu") {
                return Err(KvTypeError::Device {
                    backend: b.name().to_string(),
                    types,
                });
            }
        }
        self.kv_types = types;
        Ok(())
    }

    /// Loads the LoRA adapter at `path` (`--lora`) as the next id, applied at `scale` by the
    /// passes that name no scales of their own; returns its id. Refused, in one line naming
    /// the file, when it does not fit the model or when blocks run off the CPU (the device
    /// backends do not apply adapters): call it after [`PlacedModel::set_placement`].
    pub fn add_lora(&mut self, path: &std::path::Path, scale: f32) -> Result<usize, LoraError> {
        if let Some(b) = self.placement.stages().iter().find(|b| b.name() != "cpu") {
            return Err(LoraError::Backend {
                path: path.display().to_string(),
                backend: b.name().to_string(),
            });
        }
        let adapter = LoraAdapter::open(path, &self.model)?;
        self.model.lora.push(Arc::new(adapter));
        self.lora_mix.scales.push(scale);
        Ok(self.model.lora.len() - 1)
    }

    /// The adapters' scales of passes that name none (`--lora`, `--lora-scaled`).
    pub fn lora_mix(&self) -> &LoraMix {
        &self.lora_mix
    }

    /// How caches made now store keys and values.
    pub fn kv_types(&self) -> KvTypes {
        self.kv_types
    }

    /// A fresh KV cache for one sequence of up to `n_ctx` positions. Panics if a backend
    /// cannot make its part (device memory); see [`PlacedModel::try_new_cache_layers`].
    pub fn new_cache(&self, n_ctx: usize) -> SeqCache {
        self.new_cache_layers(n_ctx, self.config.n_layer)
    }

    /// A cache for the first `n_layers` blocks only (see [`PlacedModel::forward_layers`]); panics as
    /// [`PlacedModel::new_cache`] does.
    pub fn new_cache_layers(&self, n_ctx: usize, n_layers: usize) -> SeqCache {
        self.try_new_cache_layers(n_ctx, n_layers)
            .unwrap_or_else(|e| panic!("cannot make a KV cache: {e}"))
    }

    /// [`PlacedModel::new_cache_layers`], passing a backend's failure on.
    pub fn try_new_cache_layers(
        &self,
        n_ctx: usize,
        n_layers: usize,
    ) -> Result<SeqCache, BackendError> {
        self.placement
            .new_cache(&self.model, n_ctx, n_layers, self.kv_types)
    }

    /// Context shift of `cache`: forgets positions `keep..keep + discard` and moves the rest
    /// down, re-rotating their keys for their new positions, each part on its backend. Panics
    /// if a backend fails; see [`PlacedModel::try_shift_cache`].
    pub fn shift_cache(&self, cache: &mut SeqCache, keep: usize, discard: usize) {
        self.try_shift_cache(cache, keep, discard)
            .unwrap_or_else(|e| panic!("context shift failed: {e}"))
    }

    /// [`PlacedModel::shift_cache`], passing a backend's failure on.
    pub fn try_shift_cache(
        &self,
        cache: &mut SeqCache,
        keep: usize,
        discard: usize,
    ) -> Result<(), BackendError> {
        for (backend, part) in self.placement.stages().iter().zip(cache.parts_mut()) {
            backend.shift(&self.model, part.as_mut(), keep, discard)?;
        }
        Ok(())
    }

    /// Runs `batch`, storing keys and values in `caches[seq]`, and returns the logits of the
    /// entries that asked for them, `n_vocab` floats each, in batch order.
    ///
    /// Panics if a token id is out of the vocabulary or a position is beyond its cache: callers
    /// validate input first. Panics too if a backend fails (a device error); see
    /// [`PlacedModel::try_forward_plan`] for the error instead.
    /// `caches` holds the caches themselves or mutable references to them (the server's slots
    /// each own theirs).
    pub fn forward<C: BorrowMut<SeqCache>>(&self, batch: &Batch, caches: &mut [C]) -> Vec<f32> {
        self.forward_layers(batch, caches, self.config.n_layer)
    }

    /// [`PlacedModel::forward`] through the first `n_layers` blocks only, then the output norm and
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

    /// [`PlacedModel::forward`] as `plan` says: fewer blocks, or fewer routed experts (drafts).
    pub fn forward_plan<C: BorrowMut<SeqCache>>(
        &self,
        batch: &Batch,
        caches: &mut [C],
        plan: ForwardPlan,
    ) -> Vec<f32> {
        self.try_forward_plan(batch, caches, plan)
            .unwrap_or_else(|e| panic!("forward pass failed: {e}"))
    }

    /// [`PlacedModel::forward_plan`], passing a backend's failure on.
    pub fn try_forward_plan<C: BorrowMut<SeqCache>>(
        &self,
        batch: &Batch,
        caches: &mut [C],
        plan: ForwardPlan,
    ) -> Result<Vec<f32>, BackendError> {
        self.try_forward_mix(batch, caches, plan, &self.lora_mix)
    }

    /// [`PlacedModel::try_forward_plan`] with the LoRA adapters at the scales of `lora` (a
    /// server request's) instead of the model's own.
    pub fn try_forward_mix<C: BorrowMut<SeqCache>>(
        &self,
        batch: &Batch,
        caches: &mut [C],
        plan: ForwardPlan,
        lora: &LoraMix,
    ) -> Result<Vec<f32>, BackendError> {
        let h = self.final_hidden(batch, None, caches, plan, lora)?;
        self.output_head(&h, lora)
    }

    /// [`PlacedModel::try_forward_plan`] of the whole model with the input rows given instead of
    /// looked up: `rows` holds `n_embd` floats for each entry of `batch` (an image's embeddings
    /// from a vision projector), whose token ids are not read. The rows go into the first block
    /// as they are, unscaled, as llama.cpp feeds a batch of embeddings.
    ///
    /// Panics if `rows` is not `batch.len() × n_embd` floats.
    pub fn try_forward_embeddings<C: BorrowMut<SeqCache>>(
        &self,
        batch: &Batch,
        rows: &[f32],
        caches: &mut [C],
    ) -> Result<Vec<f32>, BackendError> {
        self.try_forward_embeddings_mix(batch, rows, caches, &self.lora_mix)
    }

    /// [`PlacedModel::try_forward_embeddings`] with the LoRA adapters at the scales of `lora`.
    pub fn try_forward_embeddings_mix<C: BorrowMut<SeqCache>>(
        &self,
        batch: &Batch,
        rows: &[f32],
        caches: &mut [C],
        lora: &LoraMix,
    ) -> Result<Vec<f32>, BackendError> {
        assert_eq!(
            rows.len(),
            batch.len() * self.config.n_embd,
            "forward_embeddings: one row of the model's width per entry"
        );
        let full = ForwardPlan::full(&self.config);
        let h = self.final_hidden(batch, Some(rows), caches, full, lora)?;
        self.output_head(&h, lora)
    }

    /// The hidden states after the last block and the output norm, `n_embd` floats for each
    /// entry that asked for output, in batch order: what llama.cpp returns as a decoder model's
    /// token embeddings (its `result_norm`), before the output head. Caches fill as in
    /// [`PlacedModel::forward`], which this panics as.
    pub fn hidden_states<C: BorrowMut<SeqCache>>(
        &self,
        batch: &Batch,
        caches: &mut [C],
    ) -> Vec<f32> {
        self.try_hidden_states(batch, caches)
            .unwrap_or_else(|e| panic!("forward pass failed: {e}"))
    }

    /// [`PlacedModel::hidden_states`], passing a backend's failure on.
    pub fn try_hidden_states<C: BorrowMut<SeqCache>>(
        &self,
        batch: &Batch,
        caches: &mut [C],
    ) -> Result<Vec<f32>, BackendError> {
        let full = ForwardPlan::full(&self.config);
        self.final_hidden(batch, None, caches, full, &self.lora_mix)
    }

    /// The batch through the blocks (and experts) `plan` names, each range on its backend,
    /// then the output norm of the rows that asked for output. The input rows are `rows` when
    /// given, else the token embeddings of the batch's ids.
    fn final_hidden<C: BorrowMut<SeqCache>>(
        &self,
        batch: &Batch,
        rows: Option<&[f32]>,
        caches: &mut [C],
        plan: ForwardPlan,
        lora: &LoraMix,
    ) -> Result<Vec<f32>, BackendError> {
        let cfg = &self.config;
        let n = batch.len();
        let e = cfg.n_embd;
        let mut x = match rows {
            Some(rows) => rows.to_vec(),
            None => self.token_embeddings(&batch.tokens),
        };
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
                lora,
            };
            backend.run(&self.model, &pass, &mut parts, &mut x)?;
        }

        let out_rows: Vec<usize> = (0..n).filter(|&i| batch.logits[i]).collect();
        let mut h = vec![0f32; out_rows.len() * e];
        for (dst, &i) in h.chunks_exact_mut(e).zip(&out_rows) {
            dst.copy_from_slice(&x[i * e..(i + 1) * e]);
        }
        rms_norm_rows(&mut h, &self.weights.output_norm, e, cfg.rms_eps);
        Ok(h)
    }

    /// The input rows of `tokens`: their embeddings, scaled where the model scales them.
    pub fn token_embeddings(&self, tokens: &[u32]) -> Vec<f32> {
        let cfg = &self.config;
        let e = cfg.n_embd;
        let mut x = vec![0f32; tokens.len() * e];
        let embd = self.weights.token_embd.mat(&self.file);
        for (row, &tok) in x.chunks_exact_mut(e).zip(tokens) {
            assert!(
                (tok as usize) < cfg.n_vocab,
                "token id {tok} out of vocabulary"
            );
            embd.dequantize_row(tok as usize, row);
            if let Some(s) = cfg.embed_scale {
                row.iter_mut().for_each(|v| *v *= s);
            }
        }
        x
    }

    /// Logits of output-normed hidden rows `h` (`n_embd` floats each): on the backend the
    /// placement names for the head, else on the host; the final soft-cap on the host.
    fn output_head(&self, h: &[f32], lora: &LoraMix) -> Result<Vec<f32>, BackendError> {
        let cfg = &self.config;
        let n_rows = h.len() / cfg.n_embd;
        let mut logits = vec![0f32; n_rows * cfg.n_vocab];
        let on_backend = self
            .placement
            .head()
            .and_then(|b| b.output_head(&self.model, h, &mut logits));
        match on_backend {
            Some(done) => done?,
            None => {
                let out = &self.weights.output;
                matmul(&out.cpu_mat(&self.file), h, n_rows, &mut logits);
                LoraAdapters::new(&self.lora, lora).apply_named(
                    &out.info.name,
                    0..cfg.n_vocab,
                    h,
                    n_rows,
                    &mut logits,
                );
            }
        }
        if let Some(cap) = cfg.final_softcap {
            softcap_all(&mut logits, cap);
        }
        Ok(logits)
    }
}
