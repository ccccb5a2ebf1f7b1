//! The CPU backend: a range of blocks run on the host thread pool, the engine's own kernels.
//! Its weights stay where the model file is mapped (nothing is copied), its cache part is the
//! host [`KvCache`] of its layers, and its activation scratch lives for one pass. The block
//! math is in `layer.rs` (attention and dense feed-forward), `mla.rs` (latent attention) and
//! `moe_ffn.rs` (experts), free functions over the model's weights.

mod layer;
pub(crate) mod lora;
mod mla;
mod moe_ffn;

use super::{Backend, BackendError, LayerCache, Pass};
use crate::backend::{KvCache, KvTypes};
use crate::model::Model;
use crate::ops::attention::rotation::hadamard;
use layer::Scratch;
use std::ops::Range;

/// Blocks run on the CPU.
pub struct CpuBackend {
    layers: Range<usize>,
}

impl CpuBackend {
    /// A backend for blocks `layers`.
    pub fn new(layers: Range<usize>) -> CpuBackend {
        CpuBackend { layers }
    }

    /// `cache` as the host cache this backend made.
    fn own<'c>(&self, cache: &'c mut dyn LayerCache) -> Result<&'c mut KvCache, BackendError> {
        let layers = cache.layers();
        cache
            .as_any_mut()
            .downcast_mut::<KvCache>()
            .ok_or_else(|| BackendError::ForeignCache {
                backend: self.name().to_string(),
                layers,
            })
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &str {
        "cpu"
    }

    fn reads_bidirectional(&self) -> bool {
        true
    }

    fn reads_mrope(&self) -> bool {
        true
    }

    fn layers(&self) -> Range<usize> {
        self.layers.clone()
    }

    fn new_cache(
        &self,
        model: &Model,
        layers: Range<usize>,
        n_ctx: usize,
        types: KvTypes,
    ) -> Result<Box<dyn LayerCache>, BackendError> {
        // Refused before a cache is made (`PlacedModel::set_kv_types`); checked again here.
        if types.check_model(model).is_err() {
            return Err(BackendError::Unsupported {
                backend: self.name().to_string(),
                types: types.to_string(),
            });
        }
        Ok(Box::new(KvCache::typed(
            layers,
            n_ctx,
            model.config.kv_dim(),
            types,
        )))
    }

    fn run(
        &self,
        model: &Model,
        pass: &Pass,
        caches: &mut [&mut dyn LayerCache],
        x: &mut [f32],
    ) -> Result<(), BackendError> {
        let mut kv = Vec::with_capacity(caches.len());
        for c in caches.iter_mut() {
            let c = self.own(&mut **c)?;
            if !c.layers().contains(&pass.layers.start) || c.layers().end < pass.layers.end {
                return Err(BackendError::ForeignCache {
                    backend: self.name().to_string(),
                    layers: c.layers(),
                });
            }
            kv.push(c);
        }
        let n = pass.batch.len();
        let adapters = lora::Adapters::new(&model.lora, pass.lora);
        let mut scratch = Scratch::new(&model.config, n, adapters);
        for il in pass.layers.clone() {
            let layer = &model.weights.layers[il];
            layer::attention_block(model, il, layer, pass.batch, &mut kv, x, &mut scratch);
            layer::ffn_block(model, layer, n, pass.plan, x, &mut scratch);
        }
        Ok(())
    }

    fn shift(
        &self,
        model: &Model,
        cache: &mut dyn LayerCache,
        keep: usize,
        discard: usize,
    ) -> Result<(), BackendError> {
        let cache = self.own(cache)?;
        let cfg = &model.config;
        let layers = cache.layers();
        let ropes: Vec<_> = layers
            .clone()
            .map(|il| model.layer_rope(il, cache.n_ctx()))
            .collect();
        // Latent attention's cache rows end in the one rotated key part.
        let (rotated, width) = match &cfg.mla {
            Some(m) => (m.kv_lora_rank.., m.qk_rope),
            None => (0.., cfg.head_dim),
        };
        // Keys stored rotated (quantized keys, not latent attention) are rotated back for the
        // RoPE fix and again after, as llama.cpp's shift does.
        let k_rot = match &cfg.mla {
            Some(_) => None,
            None => cache.types().key_rotation(cfg.head_dim),
        };
        cache.shift(keep, discard, |layer, key| {
            if let Some(r) = k_rot {
                hadamard(key, r);
            }
            ropes[layer - layers.start].unrotate(&mut key[rotated.clone()], width, discard);
            if let Some(r) = k_rot {
                hadamard(key, r);
            }
        });
        Ok(())
    }
}
