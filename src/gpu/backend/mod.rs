//! The CUDA device backend: a range of a model's blocks (and optionally the output head) run by
//! the kernels of `gpu-src/` on one GPU, behind the seam's [`Backend`] trait. Weights are copied
//! to the device once, in their GGUF block layout (`weights.rs`); each sequence's keys and
//! values for these blocks live in device memory (`cache.rs`); a pass uploads the hidden rows,
//! runs every block as a sequence of kernel launches (`pass.rs`) and downloads the rows.
//!
//! UNTESTED ON HARDWARE: this builds, and its host-side logic (weights, caches, launch shapes) is
//! tested against a fake driver, but no kernel launched here has run on a GPU yet; see README,
//! "GPU", for what a device must check.

mod cache;
mod pass;
mod weights;

pub use cache::CudaCache;
pub use weights::{kernel_suffix, WeightsError};

use crate::backend::{Backend, BackendError, LayerCache, Pass};
use crate::gpu::{Device, DeviceBuffer, Kernel};
use crate::model::{Attention, Ffn, Model};
use cache::device_error;
use std::collections::HashMap;
use std::ops::Range;
use weights::{upload_f32, upload_matrix, DeviceMatrix};

/// One block's weights on the device.
struct DeviceLayer {
    attn_norm: DeviceBuffer,
    wq: DeviceMatrix,
    wk: DeviceMatrix,
    wv: DeviceMatrix,
    wo: DeviceMatrix,
    bq: Option<DeviceBuffer>,
    bk: Option<DeviceBuffer>,
    bv: Option<DeviceBuffer>,
    q_norm: Option<DeviceBuffer>,
    k_norm: Option<DeviceBuffer>,
    post_attn_norm: Option<DeviceBuffer>,
    ffn_norm: DeviceBuffer,
    gate: DeviceMatrix,
    up: DeviceMatrix,
    down: DeviceMatrix,
    post_ffn_norm: Option<DeviceBuffer>,
}

/// Blocks (and maybe the output head) on one NVIDIA GPU.
pub struct CudaBackend {
    device: Device,
    name: String,
    layers: Range<usize>,
    blocks: Vec<DeviceLayer>,
    head: Option<DeviceMatrix>,
    kernels: HashMap<String, Kernel>,
}

/// Every kernel the backend launches, for weight types `suffixes`.
fn kernel_names(suffixes: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = [
        "rms_norm",
        "rope",
        "kv_store",
        "attention",
        "swiglu",
        "geglu",
        "add",
        "add_rows",
        "scale",
        "softcap",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for s in suffixes {
        names.push(format!("matvec_{s}"));
        names.push(format!("matmul_{s}"));
    }
    names.sort();
    names.dedup();
    names
}

impl CudaBackend {
    /// Uploads the weights of blocks `layers` of `model` (and the output matrix when `head`)
    /// to `device`; refused, naming the tensor, when a weight's type has no kernel, the model
    /// has experts, or the device memory runs out.
    pub fn new(
        model: &Model,
        device: &Device,
        layers: Range<usize>,
        head: bool,
    ) -> Result<CudaBackend, WeightsError> {
        let file = &*model.file;
        let dev = device;
        if model.config.head_dim > 256 {
            return Err(WeightsError::HeadDim(model.config.head_dim));
        }
        if model.config.rope.yarn.is_some() {
            return Err(WeightsError::Yarn);
        }
        let mut blocks = Vec::with_capacity(layers.len());
        let mut suffixes = Vec::new();
        let opt =
            |name: String, v: &Option<Vec<f32>>| -> Result<Option<DeviceBuffer>, WeightsError> {
                v.as_deref().map(|v| upload_f32(dev, &name, v)).transpose()
            };
        for il in layers.clone() {
            let l = &model.weights.layers[il];
            let Ffn::Dense(ffn) = &l.ffn else {
                return Err(WeightsError::Experts);
            };
            let Attention::Mha(a) = &l.attn else {
                return Err(WeightsError::LatentAttention);
            };
            let t = |s: &str| format!("blk.{il}.{s}");
            let b = DeviceLayer {
                attn_norm: upload_f32(dev, &t("attn_norm"), &l.attn_norm)?,
                wq: upload_matrix(dev, &t("attn_q"), &a.wq.mat(file))?,
                wk: upload_matrix(dev, &t("attn_k"), &a.wk.mat(file))?,
                wv: upload_matrix(dev, &t("attn_v"), &a.wv.mat(file))?,
                wo: upload_matrix(dev, &t("attn_output"), &l.wo.mat(file))?,
                bq: opt(t("attn_q.bias"), &a.bq)?,
                bk: opt(t("attn_k.bias"), &a.bk)?,
                bv: opt(t("attn_v.bias"), &a.bv)?,
                q_norm: opt(t("attn_q_norm"), &a.q_norm)?,
                k_norm: opt(t("attn_k_norm"), &a.k_norm)?,
                post_attn_norm: opt(t("post_attention_norm"), &l.post_attn_norm)?,
                ffn_norm: upload_f32(dev, &t("ffn_norm"), &l.ffn_norm)?,
                gate: upload_matrix(dev, &t("ffn_gate"), &ffn.gate.mat(file))?,
                up: upload_matrix(dev, &t("ffn_up"), &ffn.up.mat(file))?,
                down: upload_matrix(dev, &t("ffn_down"), &ffn.down.mat(file))?,
                post_ffn_norm: opt(t("post_ffw_norm"), &l.post_ffn_norm)?,
            };
            for m in [&b.wq, &b.wk, &b.wv, &b.wo, &b.gate, &b.up, &b.down] {
                suffixes.push(m.suffix);
            }
            blocks.push(b);
        }
        let head = if head {
            let m = upload_matrix(dev, "output", &model.weights.output.mat(file))?;
            suffixes.push(m.suffix);
            Some(m)
        } else {
            None
        };
        let mut kernels = HashMap::new();
        for name in kernel_names(&suffixes) {
            let k = dev.kernel(&name).map_err(|error| WeightsError::Upload {
                tensor: format!("kernel {name}"),
                error,
            })?;
            kernels.insert(name, k);
        }
        Ok(CudaBackend {
            device: device.clone(),
            name: format!("cuda{}", device.info().index),
            layers,
            blocks,
            head,
            kernels,
        })
    }

    /// `cache` as a part this backend made, holding `layers`.
    fn own<'c>(
        &self,
        cache: &'c mut dyn LayerCache,
        layers: &Range<usize>,
    ) -> Result<&'c mut CudaCache, BackendError> {
        let held = cache.layers();
        match cache.as_any_mut().downcast_mut::<CudaCache>() {
            Some(c) if held.start <= layers.start && layers.end <= held.end => Ok(c),
            _ => Err(BackendError::ForeignCache {
                backend: self.name.clone(),
                layers: held,
            }),
        }
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn layers(&self) -> Range<usize> {
        self.layers.clone()
    }

    fn new_cache(
        &self,
        model: &Model,
        layers: Range<usize>,
        n_ctx: usize,
    ) -> Result<Box<dyn LayerCache>, BackendError> {
        let cache = CudaCache::new(&self.device, layers, n_ctx, model.config.kv_dim())
            .map_err(device_error)?;
        Ok(Box::new(cache))
    }

    fn run(
        &self,
        model: &Model,
        pass: &Pass,
        caches: &mut [&mut dyn LayerCache],
        x: &mut [f32],
    ) -> Result<(), BackendError> {
        let mut own = Vec::with_capacity(caches.len());
        for c in caches.iter_mut() {
            own.push(self.own(&mut **c, &pass.layers)?);
        }
        pass::run_blocks(self, model, pass, &mut own, x).map_err(device_error)
    }

    fn shift(
        &self,
        model: &Model,
        cache: &mut dyn LayerCache,
        keep: usize,
        discard: usize,
    ) -> Result<(), BackendError> {
        let layers = cache.layers();
        let cache = self.own(cache, &layers)?;
        // Through the host: the CPU's re-rotation, then back (a context shift is rare).
        let mut host = cache.to_host()?;
        let hd = model.config.head_dim;
        let ropes: Vec<_> = layers
            .clone()
            .map(|il| model.layer_rope(il, host.n_ctx()))
            .collect();
        host.shift(keep, discard, |layer, key| {
            ropes[layer - layers.start].unrotate(key, hd, discard)
        });
        cache.load_host(&host)
    }

    fn output_head(
        &self,
        model: &Model,
        h: &[f32],
        logits: &mut [f32],
    ) -> Option<Result<(), BackendError>> {
        let head = self.head.as_ref()?;
        Some(pass::output_head(self, model, head, h, logits).map_err(device_error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_the_backend_launches_is_in_the_embedded_ptx() {
        let names = kernel_names(&["q4_0", "q6_k", "f16", "q4_0"]);
        assert_eq!(
            names.iter().filter(|n| n.as_str() == "matvec_q4_0").count(),
            1
        );
        for name in names {
            let entry = format!(".entry {name}(");
            assert!(
                crate::gpu::kernels::MODULES
                    .iter()
                    .any(|m| m.ptx.contains(&entry)),
                "{name} is launched but not compiled"
            );
        }
    }
}
