//! Weight lookup by GGUF tensor name. Tensors stay in the mapped file; this module only checks
//! that each one exists with the expected shape and remembers where it is. Fused tensors (Phi-3's
//! QKV and gate/up) are split into row ranges of the one tensor, never copied, and so are the
//! experts of a 3-D expert tensor (`[n_embd, n_ff, n_expert]`: expert `e` is rows
//! `e·n_ff..(e+1)·n_ff` of the tensor seen as one matrix).

use std::cell::RefCell;
use std::collections::HashSet;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use super::classifier::Classifier;
use super::encoder::EncoderWeights;
use super::mla::{MlaConfig, MlaQuery, MlaWeights};
use super::{Config, ModelError, MoeConfig, NormPlacement, RopeFactors};
use crate::gguf::{GgufFile, SharedBytes, TensorInfo};
use crate::ops::QMat;
use crate::quant::GgmlType;

/// A named tensor of the model file, shape-checked.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub info: TensorInfo,
    /// Its regrouped copy for the CPU kernels, made on first use ([`Tensor::cpu_mat`]).
    pub x8: Regrouped,
}

/// A K-quant tensor's rows regrouped eight at a time (`quant::x8`) for the CPU's one-token
/// and small-batch kernels, made the first time the CPU multiplies by the tensor and shared by
/// the tensor's clones; `None` inside when the tensor cannot or should not be regrouped.
/// Setting `LLAMAFILE_X8=0` keeps every tensor as it is in the file (for comparisons).
#[derive(Clone, Default)]
pub struct Regrouped(Arc<OnceLock<Option<SharedBytes>>>);

impl std::fmt::Debug for Regrouped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.0.get() {
            None => "not yet",
            Some(None) => "no",
            Some(Some(_)) => "yes",
        };
        write!(f, "Regrouped({state})")
    }
}

impl Regrouped {
    /// The regrouped bytes of `m` (the whole tensor, read from `file`), made now if they were
    /// not yet. Once made, the file's pages of the tensor are given back: the kernels read the
    /// copy, so the memory is not held twice (what else reads those rows maps them again).
    fn get_or_make(&self, m: &QMat, file: &GgufFile) -> Option<&[u8]> {
        self.0
            .get_or_init(|| {
                let copy = regroup(m);
                if copy.is_some() {
                    file.release_pages(m.data);
                }
                copy
            })
            .as_ref()
            .map(|b| b.as_slice())
    }
}

/// `m` regrouped, when the kernels in use read its type so and it has whole groups of rows.
fn regroup(m: &QMat) -> Option<SharedBytes> {
    use crate::quant::x8;
    static ENABLED: OnceLock<bool> = OnceLock::new();
    let enabled = *ENABLED.get_or_init(|| std::env::var("LLAMAFILE_X8").as_deref() != Ok("0"));
    if !enabled || !x8::can_regroup(m.ty, m.rows) {
        return None;
    }
    let n_blocks = m.cols / crate::quant::QK_K;
    let group_bytes = x8::ROWS * m.row_bytes();
    // Anonymous memory that fails to map leaves the tensor as it is: only slower.
    SharedBytes::anon_filled(m.data.len(), |dst| {
        crate::pool::global().for_each_chunk(dst, 64 * group_bytes, |i, part| {
            let src = &m.data[i * 64 * group_bytes..][..part.len()];
            let rows = part.len() / m.row_bytes();
            x8::regroup_into(m.ty, src, rows, n_blocks, part);
        });
    })
    .ok()
}

impl Tensor {
    /// The tensor as a matrix of `dims[1] · dims[2] · …` rows × `dims[0]` columns, borrowing
    /// from `file`.
    pub fn mat<'a>(&self, file: &'a GgufFile) -> QMat<'a> {
        let d = &self.info.dims;
        QMat {
            ty: self.info.ty,
            rows: d[1..].iter().product::<u64>() as usize,
            cols: d[0] as usize,
            data: file.tensor_data(&self.info),
            x8: None,
        }
    }

    /// [`Tensor::mat`] with the regrouped copy the CPU kernels read (made on the first call).
    pub fn cpu_mat<'a>(&'a self, file: &'a GgufFile) -> QMat<'a> {
        let mut m = self.mat(file);
        m.x8 = self.x8.get_or_make(&m, file);
        m
    }

    /// The tensor's values as f32 (small vectors: norms and biases).
    pub fn to_f32(&self, file: &GgufFile) -> Vec<f32> {
        let m = self.mat(file);
        let mut out = vec![0f32; m.rows * m.cols];
        for (r, dst) in out.chunks_exact_mut(m.cols).enumerate() {
            m.dequantize_row(r, dst);
        }
        out
    }
}

/// A weight matrix that is a range of rows of a tensor: all of it, or one part of a fused one.
#[derive(Clone, Debug)]
pub struct RowView {
    pub tensor: Tensor,
    pub rows: Range<usize>,
}

impl RowView {
    /// The whole of `tensor`.
    pub fn whole(tensor: Tensor) -> RowView {
        let rows = tensor.info.dims[1..].iter().product::<u64>() as usize;
        RowView {
            tensor,
            rows: 0..rows,
        }
    }

    /// The rows as a matrix borrowing from `file` (a sub-slice of the tensor's bytes).
    pub fn mat<'a>(&self, file: &'a GgufFile) -> QMat<'a> {
        self.tensor.mat(file).row_range(self.rows.clone())
    }

    /// [`RowView::mat`] with the tensor's regrouped copy ([`Tensor::cpu_mat`]).
    pub fn cpu_mat<'a>(&'a self, file: &'a GgufFile) -> QMat<'a> {
        self.tensor.cpu_mat(file).row_range(self.rows.clone())
    }
}

/// The weights of one transformer block. Norm weights and biases are small and kept as f32.
pub struct Layer {
    pub attn_norm: Vec<f32>,
    pub attn: Attention,
    pub wo: Tensor,
    pub post_attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub ffn: Ffn,
    pub post_ffn_norm: Option<Vec<f32>>,
}

/// How a block projects its queries, keys and values.
// One per layer, built once at load: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Attention {
    /// Q, K and V projections (grouped-query attention).
    Mha(MhaWeights),
    /// Multi-head latent attention (DeepSeek-V2/V3).
    Mla(MlaWeights),
}

/// Q/K/V projections, their optional biases and QK-norms.
pub struct MhaWeights {
    pub wq: RowView,
    pub wk: RowView,
    pub wv: RowView,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
}

/// A feed-forward block's weights.
// One per layer, built once at load: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Ffn {
    Dense(DenseFfn),
    Moe(MoeFfn),
}

/// A gated feed-forward network: `down(act(gate·x) ⊙ up·x)`.
pub struct DenseFfn {
    pub gate: RowView,
    pub up: RowView,
    pub down: RowView,
}

/// A mixture of experts: the router, the routed experts, and an optional shared expert.
pub struct MoeFfn {
    pub config: MoeConfig,
    /// `ffn_gate_inp`: one row of router logits per expert.
    pub router: Tensor,
    /// `exp_probs_b`: added to the router's probabilities to choose experts (DeepSeek-V3).
    pub selection_bias: Option<Vec<f32>>,
    pub gate: Experts,
    pub up: Experts,
    pub down: Experts,
    pub shared: Option<SharedExpert>,
}

/// A 3-D tensor of `n_expert` matrices of `rows` rows each.
#[derive(Clone, Debug)]
pub struct Experts {
    pub tensor: Tensor,
    pub rows: usize,
}

impl Experts {
    /// Expert `e`'s matrix: a row range of the one tensor, borrowing from `file`, not a copy.
    pub fn mat<'a>(&self, file: &'a GgufFile, e: usize) -> QMat<'a> {
        self.tensor
            .mat(file)
            .row_range(e * self.rows..(e + 1) * self.rows)
    }
}

/// The shared expert: a dense FFN every token goes through; Qwen2-MoE scales it by the sigmoid
/// of `gate_inp · x`, DeepSeek adds it as is.
pub struct SharedExpert {
    /// `ffn_gate_inp_shexp`: one row, the gate's logit.
    pub gate_inp: Option<Tensor>,
    pub ffn: DenseFfn,
}

/// All weights of a model.
pub struct Weights {
    pub token_embd: Tensor,
    pub layers: Vec<Layer>,
    pub output_norm: Vec<f32>,
    /// The output projection; the token embedding when the model ties them.
    pub output: Tensor,
    /// RoPE frequency factors (see [`RopeFactors`]), when the file has them.
    pub rope_freqs: Option<Arc<[f32]>>,
    pub rope_long: Option<Arc<[f32]>>,
    pub rope_short: Option<Arc<[f32]>>,
    /// A reranker's classification head (`cls.output.weight`), when the file has one.
    pub classifier: Option<Classifier>,
    /// An encoder's weights ([`super::Arch::is_encoder`]); `layers` is then empty and
    /// `output` is the token embedding, never read.
    pub encoder: Option<EncoderWeights>,
}

impl Weights {
    /// Looks up and shape-checks every tensor `cfg` needs.
    pub fn load(file: &GgufFile, cfg: &Config) -> Result<Weights, ModelError> {
        let l = Lookup {
            file,
            used: RefCell::new(HashSet::new()),
        };
        let (e, kv, hd, ff) = (cfg.n_embd, cfg.kv_dim(), cfg.head_dim, cfg.n_ff);
        let q_dim = cfg.q_dim();
        let token_embd = l.tensor("token_embd.weight", &[e, cfg.n_vocab])?;
        if cfg.arch.is_encoder() {
            let encoder = super::encoder::load(&l, cfg)?;
            l.all_used(cfg)?;
            return Ok(Weights {
                output: token_embd.clone(),
                token_embd,
                layers: Vec::new(),
                output_norm: Vec::new(),
                rope_freqs: None,
                rope_long: None,
                rope_short: None,
                classifier: None,
                encoder: Some(encoder),
            });
        }
        let output = match l.file.tensor("output.weight") {
            Some(_) => l.tensor("output.weight", &[e, cfg.n_vocab])?,
            None => token_embd.clone(),
        };
        let layers = (0..cfg.n_layer)
            .map(|i| {
                let n = |s: &str| format!("blk.{i}.{s}");
                let opt_vec = |s: &str, len: usize| -> Result<Option<Vec<f32>>, ModelError> {
                    match l.file.tensor(&n(s)) {
                        Some(_) => Ok(Some(l.vector(&n(s), len)?)),
                        None => Ok(None),
                    }
                };
                let need_vec = |s: &str, len: usize| l.vector(&n(s), len);
                let post = cfg.norms == NormPlacement::PreAndPost;
                let opt_norm = |on: bool, s: &str, len: usize| -> Result<_, ModelError> {
                    if on {
                        Ok(Some(need_vec(s, len)?))
                    } else {
                        Ok(None)
                    }
                };
                let attn = match &cfg.mla {
                    Some(m) => Attention::Mla(l.mla(i, cfg, m)?),
                    None => {
                        let (wq, wk, wv) = if cfg.fused.qkv {
                            let t = l.tensor(&n("attn_qkv.weight"), &[e, q_dim + 2 * kv])?;
                            let part = |r: Range<usize>| RowView {
                                tensor: t.clone(),
                                rows: r,
                            };
                            (
                                part(0..q_dim),
                                part(q_dim..q_dim + kv),
                                part(q_dim + kv..q_dim + 2 * kv),
                            )
                        } else {
                            (
                                RowView::whole(l.tensor(&n("attn_q.weight"), &[e, q_dim])?),
                                RowView::whole(l.tensor(&n("attn_k.weight"), &[e, kv])?),
                                RowView::whole(l.tensor(&n("attn_v.weight"), &[e, kv])?),
                            )
                        };
                        Attention::Mha(MhaWeights {
                            wq,
                            wk,
                            wv,
                            bq: opt_vec("attn_q.bias", q_dim)?,
                            bk: opt_vec("attn_k.bias", kv)?,
                            bv: opt_vec("attn_v.bias", kv)?,
                            q_norm: opt_norm(cfg.qk_norm, "attn_q_norm.weight", hd)?,
                            k_norm: opt_norm(cfg.qk_norm, "attn_k_norm.weight", hd)?,
                        })
                    }
                };
                let o_dim = cfg.mla.as_ref().map_or(q_dim, |m| cfg.n_head * m.v_head);
                let ffn = match &cfg.moe {
                    Some(moe) if i >= moe.n_dense_lead => Ffn::Moe(l.moe(i, e, moe)?),
                    _ if cfg.fused.gate_up => {
                        let t = l.tensor(&n("ffn_up.weight"), &[e, 2 * ff])?;
                        let part = |r: Range<usize>| RowView {
                            tensor: t.clone(),
                            rows: r,
                        };
                        Ffn::Dense(DenseFfn {
                            gate: part(0..ff),
                            up: part(ff..2 * ff),
                            down: RowView::whole(l.tensor(&n("ffn_down.weight"), &[ff, e])?),
                        })
                    }
                    _ => Ffn::Dense(l.dense_ffn(&n("ffn_%.weight"), e, ff)?),
                };
                Ok(Layer {
                    attn_norm: need_vec("attn_norm.weight", e)?,
                    attn,
                    wo: l.tensor(&n("attn_output.weight"), &[o_dim, e])?,
                    post_attn_norm: opt_norm(post, "post_attention_norm.weight", e)?,
                    ffn_norm: need_vec("ffn_norm.weight", e)?,
                    ffn,
                    post_ffn_norm: opt_norm(post, "post_ffw_norm.weight", e)?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let output_norm = l.vector("output_norm.weight", e)?;
        let n_factors = cfg.rope.dims / 2;
        let factors = |name: &str| -> Result<Option<Arc<[f32]>>, ModelError> {
            match l.file.tensor(name) {
                Some(_) => Ok(Some(l.vector(name, n_factors)?.into())),
                None => Ok(None),
            }
        };
        let (rope_freqs, rope_long, rope_short) = match cfg.rope.factors {
            RopeFactors::None => (None, None, None),
            RopeFactors::Freqs => (factors("rope_freqs.weight")?, None, None),
            RopeFactors::LongShort => (
                None,
                factors("rope_factors_long.weight")?,
                factors("rope_factors_short.weight")?,
            ),
        };
        let classifier = super::classifier::load(&l, cfg)?;
        l.all_used(cfg)?;
        Ok(Weights {
            token_embd,
            layers,
            output_norm,
            output,
            rope_freqs,
            rope_long,
            rope_short,
            classifier,
            encoder: None,
        })
    }
}

pub(super) struct Lookup<'a> {
    pub(super) file: &'a GgufFile,
    /// Names of the tensors looked up so far.
    used: RefCell<HashSet<String>>,
}

impl Lookup<'_> {
    /// Refuses a file with a tensor the forward pass does not read: the file asks for math
    /// this engine does not do (llama.cpp refuses such files too), so say so rather than guess.
    fn all_used(&self, cfg: &Config) -> Result<(), ModelError> {
        let used = self.used.borrow();
        match self.file.tensors().iter().find(|t| !used.contains(&t.name)) {
            Some(extra) => Err(ModelError::UnusedTensor(
                extra.name.clone(),
                cfg.arch.name().to_string(),
            )),
            None => Ok(()),
        }
    }

    pub(super) fn tensor(&self, name: &str, dims: &[usize]) -> Result<Tensor, ModelError> {
        let info = self
            .file
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        self.used.borrow_mut().insert(name.to_string());
        let got: Vec<usize> = info.dims.iter().map(|&d| d as usize).collect();
        if got != dims {
            return Err(ModelError::TensorShape {
                name: name.to_string(),
                want: dims.to_vec(),
                got,
            });
        }
        if info.ty == GgmlType::Q8_1 || info.ty == GgmlType::Q8K {
            return Err(ModelError::UnsupportedWeightType {
                name: name.to_string(),
                ty: info.ty,
            });
        }
        Ok(Tensor {
            info: info.clone(),
            x8: Regrouped::default(),
        })
    }

    pub(super) fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        Ok(self.tensor(name, &[len])?.to_f32(self.file))
    }

    /// A dense FFN whose tensor names are `pattern` with `%` replaced by gate, up and down.
    fn dense_ffn(&self, pattern: &str, e: usize, ff: usize) -> Result<DenseFfn, ModelError> {
        let name = |part: &str| pattern.replace('%', part);
        Ok(DenseFfn {
            gate: RowView::whole(self.tensor(&name("gate"), &[e, ff])?),
            up: RowView::whole(self.tensor(&name("up"), &[e, ff])?),
            down: RowView::whole(self.tensor(&name("down"), &[ff, e])?),
        })
    }

    /// The latent-attention weights of layer `il`, shaped as llama.cpp loads them.
    fn mla(&self, il: usize, cfg: &Config, m: &MlaConfig) -> Result<MlaWeights, ModelError> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let (e, nh) = (cfg.n_embd, cfg.n_head);
        let q_width = nh * (m.qk_nope + m.qk_rope);
        let q = match m.q_lora_rank {
            Some(rank) => MlaQuery::LowRank {
                a: self.tensor(&n("attn_q_a.weight"), &[e, rank])?,
                a_norm: self.vector(&n("attn_q_a_norm.weight"), rank)?,
                b: self.tensor(&n("attn_q_b.weight"), &[rank, q_width])?,
            },
            None => MlaQuery::Plain(self.tensor(&n("attn_q.weight"), &[e, q_width])?),
        };
        let lora = m.kv_lora_rank;
        Ok(MlaWeights {
            q,
            kv_a: self.tensor(&n("attn_kv_a_mqa.weight"), &[e, lora + m.qk_rope])?,
            kv_a_norm: self.vector(&n("attn_kv_a_norm.weight"), lora)?,
            k_b: self.tensor(&n("attn_k_b.weight"), &[m.qk_nope, lora, nh])?,
            v_b: self.tensor(&n("attn_v_b.weight"), &[lora, m.v_head, nh])?,
        })
    }

    /// The experts of layer `il`, shaped as llama.cpp loads them.
    fn moe(&self, il: usize, e: usize, moe: &MoeConfig) -> Result<MoeFfn, ModelError> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let (ne, ff) = (moe.n_expert, moe.n_ff_exp);
        let experts = |s: &str, rows: usize, cols: usize| -> Result<Experts, ModelError> {
            Ok(Experts {
                tensor: self.tensor(&n(s), &[cols, rows, ne])?,
                rows,
            })
        };
        let shared = match moe.shared {
            Some(sh) => Some(SharedExpert {
                gate_inp: match sh.gated {
                    true => Some(self.tensor(&n("ffn_gate_inp_shexp.weight"), &[e])?),
                    false => None,
                },
                ffn: self.dense_ffn(&n("ffn_%_shexp.weight"), e, sh.n_ff)?,
            }),
            None => None,
        };
        let bias = n("exp_probs_b.bias");
        let selection_bias = match self.file.tensor(&bias) {
            Some(_) => Some(self.vector(&bias, ne)?),
            None => None,
        };
        Ok(MoeFfn {
            config: moe.clone(),
            router: self.tensor(&n("ffn_gate_inp.weight"), &[e, ne])?,
            selection_bias,
            gate: experts("ffn_gate_exps.weight", ff, e)?,
            up: experts("ffn_up_exps.weight", ff, e)?,
            down: experts("ffn_down_exps.weight", e, ff)?,
            shared,
        })
    }
}
