//! A worker's copy of the weights of the blocks it runs: one buffer on the worker holding every
//! matrix in its GGUF type, bytes as they are in the file (ggml reads the same block formats),
//! and the norms, biases and RoPE factors as f32. Uploaded once when the backend is built, each
//! tensor with `SET_TENSOR` (or offered by hash first when large, see `Conn::set_weight`).

use super::conn::Conn;
use super::graph::{contiguous_nb, nbytes, F32};
use super::wire::WireTensor;
use super::RpcError;
use crate::model::{Attention, Ffn, Model, RowView};
use std::borrow::Cow;
use std::ops::Range;

/// Where one weight lives on the worker.
#[derive(Clone, Copy, Debug)]
pub struct WeightRef {
    pub ty: u32,
    pub ne: [i64; 4],
    pub addr: u64,
}

/// The weights of one block on the worker.
pub struct LayerWeights {
    pub attn_norm: WeightRef,
    pub wq: WeightRef,
    pub wk: WeightRef,
    pub wv: WeightRef,
    pub bq: Option<WeightRef>,
    pub bk: Option<WeightRef>,
    pub bv: Option<WeightRef>,
    pub q_norm: Option<WeightRef>,
    pub k_norm: Option<WeightRef>,
    pub wo: WeightRef,
    pub ffn_norm: WeightRef,
    pub gate: WeightRef,
    pub up: WeightRef,
    pub down: WeightRef,
}

/// The weights of a range of blocks in one worker buffer.
pub struct Uploaded {
    /// The buffer's handle on the worker.
    pub buffer: u64,
    pub layers: Vec<LayerWeights>,
    pub rope_freqs: Option<WeightRef>,
    /// Bytes of the buffer.
    pub bytes: u64,
    /// Bytes that went over the wire (less than `bytes` when the worker's cache had some).
    pub sent: u64,
}

/// One tensor waiting to be placed and sent.
struct Pending<'a> {
    ty: u32,
    ne: [i64; 4],
    data: Cow<'a, [u8]>,
    name: String,
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Collects the tensors of `layers`, each pushed as an index into `list`.
struct Collector<'a> {
    list: Vec<Pending<'a>>,
}

impl<'a> Collector<'a> {
    fn matrix(&mut self, model: &'a Model, v: &RowView, name: String) -> usize {
        let m = v.mat(&model.file);
        self.list.push(Pending {
            ty: m.ty.id(),
            ne: [m.cols as i64, m.rows as i64, 1, 1],
            data: Cow::Borrowed(m.data),
            name,
        });
        self.list.len() - 1
    }

    fn vector(&mut self, v: &[f32], name: String) -> usize {
        self.list.push(Pending {
            ty: F32,
            ne: [v.len() as i64, 1, 1, 1],
            data: Cow::Owned(f32_bytes(v)),
            name,
        });
        self.list.len() - 1
    }
}

/// Uploads the weights of blocks `layers` of `model` to device `dev` of the worker. The blocks
/// must be ones the backend supports (Q/K/V attention, dense FFN, unfused tensors).
pub fn upload(
    conn: &mut Conn,
    dev: u32,
    align: u64,
    model: &Model,
    layers: Range<usize>,
) -> Result<Uploaded, RpcError> {
    let mut c = Collector { list: Vec::new() };
    // Indices into `c.list`, per layer.
    let mut idx = Vec::new();
    for il in layers.clone() {
        let l = &model.weights.layers[il];
        let (Attention::Mha(a), Ffn::Dense(f)) = (&l.attn, &l.ffn) else {
            unreachable!("layer {il} was checked to be supported");
        };
        let n = |s: &str| format!("blk.{il}.{s}");
        let opt = |c: &mut Collector<'_>, v: &Option<Vec<f32>>, s: &str| {
            v.as_ref().map(|v| c.vector(v, n(s)))
        };
        let entry = [
            Some(c.vector(&l.attn_norm, n("attn_norm"))),
            Some(c.matrix(model, &a.wq, n("attn_q"))),
            Some(c.matrix(model, &a.wk, n("attn_k"))),
            Some(c.matrix(model, &a.wv, n("attn_v"))),
            opt(&mut c, &a.bq, "attn_q.bias"),
            opt(&mut c, &a.bk, "attn_k.bias"),
            opt(&mut c, &a.bv, "attn_v.bias"),
            opt(&mut c, &a.q_norm, "attn_q_norm"),
            opt(&mut c, &a.k_norm, "attn_k_norm"),
            Some(c.matrix(model, &RowView::whole(l.wo.clone()), n("attn_output"))),
            Some(c.vector(&l.ffn_norm, n("ffn_norm"))),
            Some(c.matrix(model, &f.gate, n("ffn_gate"))),
            Some(c.matrix(model, &f.up, n("ffn_up"))),
            Some(c.matrix(model, &f.down, n("ffn_down"))),
        ];
        idx.push(entry);
    }
    let freqs = match model.config.rope.factors {
        crate::model::RopeFactors::Freqs => model.weights.rope_freqs.as_ref(),
        _ => None,
    };
    let freqs_i = freqs.map(|f| c.vector(f, "rope_freqs".to_string()));

    // Place each tensor: the device may pad rows (CUDA pads quantized rows to 512 values), so
    // it is asked the size of such tensors, as ggml's client asks.
    let mut offsets = Vec::with_capacity(c.list.len());
    let mut top = 0u64;
    let mut needs_init = Vec::with_capacity(c.list.len());
    for p in &c.list {
        let quantized = !matches!(p.ty, 0 | 1 | 30);
        let padded = quantized && p.ne[0] % 512 != 0;
        let mut size = nbytes(p.ty, p.ne);
        if padded {
            let probe = WireTensor {
                id: 1,
                ty: p.ty,
                ne: p.ne.map(|v| v as u32),
                nb: contiguous_nb(p.ty, p.ne).map(|v| v as u32),
                ..WireTensor::default()
            };
            size = size.max(conn.alloc_size(dev, &probe)?);
        }
        offsets.push(top);
        needs_init.push(padded);
        top += size.div_ceil(align) * align;
    }
    let (buffer, bytes) = conn.alloc_buffer(dev, top.max(align))?;
    let base = conn.buffer_base(buffer)?;
    let mut sent = 0u64;
    let mut refs = Vec::with_capacity(c.list.len());
    for (i, p) in c.list.iter().enumerate() {
        let t = WireTensor {
            id: i as u64 + 1,
            ty: p.ty,
            buffer,
            ne: p.ne.map(|v| v as u32),
            nb: contiguous_nb(p.ty, p.ne).map(|v| v as u32),
            data: base + offsets[i],
            name: p.name.clone(),
            ..WireTensor::default()
        };
        if needs_init[i] {
            conn.init_tensor(&t)?;
        }
        if conn.set_weight(&t, &p.data)? {
            sent += p.data.len() as u64;
        }
        refs.push(WeightRef {
            ty: p.ty,
            ne: p.ne,
            addr: base + offsets[i],
        });
    }
    let r = |i: Option<usize>| i.map(|i| refs[i]);
    let layers = idx
        .iter()
        .map(|e| {
            let must = |i: Option<usize>| refs[i.expect("always collected")];
            LayerWeights {
                attn_norm: must(e[0]),
                wq: must(e[1]),
                wk: must(e[2]),
                wv: must(e[3]),
                bq: r(e[4]),
                bk: r(e[5]),
                bv: r(e[6]),
                q_norm: r(e[7]),
                k_norm: r(e[8]),
                wo: must(e[9]),
                ffn_norm: must(e[10]),
                gate: must(e[11]),
                up: must(e[12]),
                down: must(e[13]),
            }
        })
        .collect();
    Ok(Uploaded {
        buffer,
        layers,
        rope_freqs: r(freqs_i),
        bytes,
        sent,
    })
}
