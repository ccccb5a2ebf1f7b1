//! The CUDA device backend: a range of a model's blocks (and optionally the output head) run by
//! the kernels of `gpu-src/` on one GPU, behind the seam's [`Backend`] trait. Weights are copied
//! to the device once, in their GGUF block layout (`weights.rs`); each sequence's keys and
//! values for these blocks live in device memory (`cache.rs`); a pass uploads the hidden rows,
//! runs every block as a sequence of kernel launches (`pass.rs`) and downloads the rows. Which
//! blocks it can take is decided from the file alone, before any device is touched
//! ([`CudaBackend::supports`], [`CudaBackend::supports_head`], [`CudaBackend::supports_model`]),
//! so that the front end can keep the others on the CPU; [`CudaBackend::new`] runs the same checks.
//!
//! UNTESTED ON HARDWARE: this builds, and its host-side logic (weights, caches, launch shapes) is
//! tested against a fake driver, but no kernel launched here has run on a GPU yet; see README,
//! "GPU", for what a device must check.

mod cache;
mod pass;
mod weights;

pub use cache::CudaCache;
pub use pass::{launch_elementwise, launch_project, matrix_launch, shape};
pub use weights::{
    check_matrix, f32_bytes, f32_from_bytes, kernel_suffix, DeviceMatrix, WeightsError,
};

use crate::backend::{Backend, BackendError, KvTypes, LayerCache, Pass};
use crate::gpu::{Device, DeviceBuffer, Kernel};
use crate::model::{Attention, DenseFfn, Ffn, Layer, MhaWeights, Model};
use crate::ops::QMat;
use cache::device_error;
use std::collections::HashMap;
use std::ops::Range;
use weights::{upload_f32, upload_matrix};

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
        "rope_multi",
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

/// The lines that say which blocks of the device's share stay on the CPU and why: one per
/// distinct reason, its blocks in the order given (`llamafile: layers 5, 9..12 stay on the CPU:
/// ffn_down is Q5_1, which the CUDA kernels do not read`).
pub fn lines_staying_on_cpu(refused: &[(usize, WeightsError)]) -> Vec<String> {
    let mut by_reason: Vec<(String, Vec<usize>)> = Vec::new();
    for (il, e) in refused {
        let reason = e.in_any_block(*il);
        match by_reason.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, layers)) => layers.push(*il),
            None => by_reason.push((reason, vec![*il])),
        }
    }
    by_reason
        .into_iter()
        .map(|(reason, layers)| {
            let (noun, verb) = match layers.len() {
                1 => ("layer", "stays"),
                _ => ("layers", "stay"),
            };
            let layers = layer_runs(&layers);
            format!("llamafile: {noun} {layers} {verb} on the CPU: {reason}")
        })
        .collect()
}

/// Increasing layer numbers with consecutive ones joined as ranges: `5, 9..12`.
fn layer_runs(layers: &[usize]) -> String {
    let mut runs: Vec<Range<usize>> = Vec::new();
    for &il in layers {
        match runs.last_mut() {
            Some(r) if r.end == il => r.end += 1,
            _ => runs.push(il..il + 1),
        }
    }
    let text: Vec<String> = runs
        .iter()
        .map(|r| match r.len() {
            1 => r.start.to_string(),
            _ => format!("{r:?}"),
        })
        .collect();
    text.join(", ")
}

/// Block `il`'s attention and feed-forward weights, when the block is of the kind the kernels
/// run: grouped-query attention and a dense feed-forward (not experts, not latent attention).
fn dense_block(model: &Model, il: usize) -> Result<(&Layer, &MhaWeights, &DenseFfn), WeightsError> {
    let l = &model.weights.layers[il];
    let Ffn::Dense(ffn) = &l.ffn else {
        return Err(WeightsError::Experts);
    };
    let Attention::Mha(a) = &l.attn else {
        return Err(WeightsError::LatentAttention);
    };
    Ok((l, a, ffn))
}

/// Block `il`'s seven matrices, each with its name for messages (`blk.5.ffn_down`), in the
/// order q, k, v, output, gate, up, down.
fn block_matrices(model: &Model, il: usize) -> Result<[(String, QMat<'_>); 7], WeightsError> {
    let file = &*model.file;
    let (l, a, ffn) = dense_block(model, il)?;
    let t = |s: &str| format!("blk.{il}.{s}");
    Ok([
        (t("attn_q"), a.wq.mat(file)),
        (t("attn_k"), a.wk.mat(file)),
        (t("attn_v"), a.wv.mat(file)),
        (t("attn_output"), l.wo.mat(file)),
        (t("ffn_gate"), ffn.gate.mat(file)),
        (t("ffn_up"), ffn.up.mat(file)),
        (t("ffn_down"), ffn.down.mat(file)),
    ])
}

impl CudaBackend {
    /// Whether the kernels can run `model` at all, from its configuration alone: refused as a
    /// whole for what every block shares (heads over 256 dimensions, YaRN RoPE).
    pub fn supports_model(model: &Model) -> Result<(), WeightsError> {
        if model.config.head_dim > 256 {
            return Err(WeightsError::HeadDim(model.config.head_dim));
        }
        if model.config.rope.yarn.is_some() {
            return Err(WeightsError::Yarn);
        }
        Ok(())
    }

    /// Whether block `il` of `model` can run on the device, from the file alone (no device is
    /// needed): refused, naming the tensor where there is one, for experts, latent attention, a
    /// weight type without kernels, or quantized matrix columns not a multiple of 32. What the
    /// whole model must pass is [`CudaBackend::supports_model`].
    pub fn supports(model: &Model, il: usize) -> Result<(), WeightsError> {
        for (tensor, m) in block_matrices(model, il)? {
            check_matrix(&tensor, &m)?;
        }
        Ok(())
    }

    /// Whether the output matrix (the output head's) can go on the device.
    pub fn supports_head(model: &Model) -> Result<(), WeightsError> {
        check_matrix("output", &model.weights.output.mat(&model.file)).map(drop)
    }

    /// Uploads the weights of blocks `layers` of `model` (and the output matrix when `head`)
    /// to `device`. Refused before anything is uploaded when a check of
    /// [`CudaBackend::supports_model`], [`CudaBackend::supports`] or
    /// [`CudaBackend::supports_head`] fails; refused, naming the tensor, when the device memory
    /// runs out.
    pub fn new(
        model: &Model,
        device: &Device,
        layers: Range<usize>,
        head: bool,
    ) -> Result<CudaBackend, WeightsError> {
        Self::supports_model(model)?;
        for il in layers.clone() {
            Self::supports(model, il)?;
        }
        if head {
            Self::supports_head(model)?;
        }
        let file = &*model.file;
        let dev = device;
        let mut blocks = Vec::with_capacity(layers.len());
        let mut suffixes = Vec::new();
        let opt =
            |name: String, v: &Option<Vec<f32>>| -> Result<Option<DeviceBuffer>, WeightsError> {
                v.as_deref().map(|v| upload_f32(dev, &name, v)).transpose()
            };
        let put = |(tensor, m): (String, QMat)| upload_matrix(dev, &tensor, &m);
        for il in layers.clone() {
            let (l, a, _) = dense_block(model, il)?;
            let [q, k, v, o, gate, up, down] = block_matrices(model, il)?;
            let t = |s: &str| format!("blk.{il}.{s}");
            let b = DeviceLayer {
                attn_norm: upload_f32(dev, &t("attn_norm"), &l.attn_norm)?,
                wq: put(q)?,
                wk: put(k)?,
                wv: put(v)?,
                wo: put(o)?,
                bq: opt(t("attn_q.bias"), &a.bq)?,
                bk: opt(t("attn_k.bias"), &a.bk)?,
                bv: opt(t("attn_v.bias"), &a.bv)?,
                q_norm: opt(t("attn_q_norm"), &a.q_norm)?,
                k_norm: opt(t("attn_k_norm"), &a.k_norm)?,
                post_attn_norm: opt(t("post_attention_norm"), &l.post_attn_norm)?,
                ffn_norm: upload_f32(dev, &t("ffn_norm"), &l.ffn_norm)?,
                gate: put(gate)?,
                up: put(up)?,
                down: put(down)?,
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
        // The device kernels read f16 rows only.
        if types != KvTypes::default() {
            return Err(BackendError::Unsupported {
                backend: self.name.clone(),
                types: types.to_string(),
            });
        }
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
    use crate::gguf::{GgufFile, GgufWriter, Value};
    use crate::quant::GgmlType;
    use std::sync::Arc;

    /// A tiny Llama of 4 blocks (`e` wide, 4 heads unless `kv` says otherwise, zero weights):
    /// every tensor F32 but those `types` names, with the extra metadata `kv` (`llama.KEY`).
    fn tiny_llama(e: u64, types: &[(&str, GgmlType)], kv: &[(&str, Value)]) -> Model {
        let (ff, vocab) = (128u64, 8u64);
        let mut w = GgufWriter::new();
        w.add_kv("general.architecture", "llama");
        let meta: [(&str, Value); 5] = [
            ("embedding_length", (e as u32).into()),
            ("block_count", 4u32.into()),
            ("attention.head_count", 4u32.into()),
            ("feed_forward_length", (ff as u32).into()),
            ("vocab_size", (vocab as u32).into()),
        ];
        for (k, v) in meta.into_iter().chain(kv.iter().cloned()) {
            w.add_kv(format!("llama.{k}"), v);
        }
        let mut tensors = vec![
            ("token_embd".to_string(), vec![e, vocab]),
            ("output_norm".to_string(), vec![e]),
            ("output".to_string(), vec![e, vocab]),
        ];
        for il in 0..4 {
            for (name, dims) in [
                ("attn_norm", vec![e]),
                ("attn_q", vec![e, e]),
                ("attn_k", vec![e, e]),
                ("attn_v", vec![e, e]),
                ("attn_output", vec![e, e]),
                ("ffn_norm", vec![e]),
                ("ffn_gate", vec![e, ff]),
                ("ffn_up", vec![e, ff]),
                ("ffn_down", vec![ff, e]),
            ] {
                tensors.push((format!("blk.{il}.{name}"), dims));
            }
        }
        for (name, dims) in tensors {
            let ty = types
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(GgmlType::F32, |&(_, ty)| ty);
            let n = ty.bytes_for(dims.iter().product()).unwrap() as usize;
            w.add_tensor(format!("{name}.weight"), &dims, ty, vec![0u8; n])
                .unwrap();
        }
        let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        Model::load(Arc::new(file)).unwrap()
    }

    #[test]
    fn a_block_with_a_type_the_kernels_do_not_read_is_refused_alone() {
        let plain = tiny_llama(64, &[], &[]);
        assert!(CudaBackend::supports_model(&plain).is_ok());
        assert!(CudaBackend::supports_head(&plain).is_ok());
        for il in 0..4 {
            assert!(CudaBackend::supports(&plain, il).is_ok(), "layer {il}");
        }
        let mixed = tiny_llama(
            64,
            &[
                ("blk.2.ffn_down", GgmlType::Q5_1),
                ("output", GgmlType::Q5_1),
            ],
            &[],
        );
        assert!(CudaBackend::supports_model(&mixed).is_ok());
        let refused: Vec<usize> = (0..4)
            .filter(|&il| CudaBackend::supports(&mixed, il).is_err())
            .collect();
        assert_eq!(refused, [2]);
        assert_eq!(
            CudaBackend::supports(&mixed, 2).unwrap_err().to_string(),
            "blk.2.ffn_down is Q5_1, which the CUDA kernels do not read"
        );
        assert_eq!(
            CudaBackend::supports_head(&mixed).unwrap_err().to_string(),
            "output is Q5_1, which the CUDA kernels do not read"
        );
    }

    #[test]
    fn yarn_and_wide_heads_refuse_the_whole_model() {
        let yarn = tiny_llama(
            64,
            &[],
            &[
                ("rope.scaling.type", "yarn".into()),
                ("rope.scaling.factor", 4f32.into()),
                ("rope.scaling.original_context_length", 1024u32.into()),
            ],
        );
        assert!(matches!(
            CudaBackend::supports_model(&yarn),
            Err(WeightsError::Yarn)
        ));
        // Every block on its own would do: the refusal is the model's.
        assert!(CudaBackend::supports(&yarn, 0).is_ok());
        let wide = tiny_llama(320, &[], &[("attention.head_count", 1u32.into())]);
        assert!(matches!(
            CudaBackend::supports_model(&wide),
            Err(WeightsError::HeadDim(320))
        ));
    }

    #[test]
    fn the_cpu_lines_give_one_line_per_reason_with_the_layers_joined() {
        let q5_1 = |il: usize| WeightsError::UnsupportedType {
            tensor: format!("blk.{il}.ffn_down"),
            ty: GgmlType::Q5_1,
        };
        let refused = vec![
            (5, WeightsError::Experts),
            (7, q5_1(7)),
            (9, WeightsError::Experts),
            (10, WeightsError::Experts),
            (11, WeightsError::Experts),
        ];
        assert_eq!(
            lines_staying_on_cpu(&refused),
            [
                "llamafile: layers 5, 9..12 stay on the CPU: \
                 mixture-of-experts blocks have no CUDA kernels yet",
                "llamafile: layer 7 stays on the CPU: \
                 ffn_down is Q5_1, which the CUDA kernels do not read",
            ]
        );
        assert!(lines_staying_on_cpu(&[]).is_empty());
    }

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
