//! A ggml compute graph built on the client: tensors as ggml would make them (shapes, strides,
//! op numbers and op parameters of the ggml version the worker runs, see `ops.rs`), placed in
//! the worker's buffers, then serialized for `GRAPH_COMPUTE`. The worker runs the nodes in the
//! order given and allocates nothing, so every tensor a node writes needs an address: weights
//! and caches live in their own buffers, and the rest is laid out here in one compute buffer,
//! reusing the bytes of tensors whose last reader has run (first fit, in node order).

use super::ops::{self, Op};
use super::wire::{WireTensor, MAX_SRC};

/// A tensor of the graph being built.
pub type T = usize;

/// ggml type ids used for activations and indices.
pub const F32: u32 = 0;
pub const F16: u32 = 1;
pub const I32: u32 = 26;

/// Where a tensor's bytes are.
#[derive(Clone, Debug)]
enum Place {
    /// In a buffer of its own (a weight, a cache): handle and address.
    Fixed { buffer: u64, addr: u64 },
    /// In the compute buffer, for the whole pass (an input, the output).
    Kept,
    /// In the compute buffer, from the node that writes it to its last reader.
    Temp,
    /// Aliasing `root` from byte `offs`.
    View { root: T, offs: u64 },
}

#[derive(Clone, Debug)]
struct Tensor {
    ty: u32,
    ne: [i64; 4],
    nb: [u64; 4],
    op: Op,
    params: [i32; 16],
    src: Vec<T>,
    place: Place,
    /// Index in `nodes` from which the tensor must exist.
    birth: usize,
    name: String,
}

/// Elements per block and bytes per block of ggml type `ty`.
pub fn type_block(ty: u32) -> (u64, u64) {
    match ty {
        F32 | I32 => (1, 4),
        F16 => (1, 2),
        27 => (1, 8),
        _ => match crate::quant::GgmlType::from_id(ty) {
            Some(t) => (t.block_elems() as u64, t.block_bytes() as u64),
            None => (1, 1),
        },
    }
}

/// Contiguous strides of a tensor of type `ty` and sizes `ne`.
pub fn contiguous_nb(ty: u32, ne: [i64; 4]) -> [u64; 4] {
    let (blck, size) = type_block(ty);
    let mut nb = [0u64; 4];
    nb[0] = size;
    nb[1] = size * (ne[0] as u64) / blck;
    nb[2] = nb[1] * ne[1] as u64;
    nb[3] = nb[2] * ne[2] as u64;
    nb
}

/// Bytes of a contiguous tensor.
pub fn nbytes(ty: u32, ne: [i64; 4]) -> u64 {
    contiguous_nb(ty, ne)[3] * ne[3] as u64
}

/// A graph under construction.
#[derive(Default)]
pub struct Graph {
    tensors: Vec<Tensor>,
    nodes: Vec<T>,
}

/// A graph laid out in a compute buffer, ready to send.
pub struct Planned {
    /// Bytes of compute buffer the graph needs.
    pub size: u64,
    offsets: Vec<u64>,
    graph: Graph,
}

fn params_of(vals: &[i32]) -> [i32; 16] {
    let mut p = [0i32; 16];
    p[..vals.len()].copy_from_slice(vals);
    p
}

impl Graph {
    fn push(&mut self, t: Tensor) -> T {
        self.tensors.push(t);
        self.tensors.len() - 1
    }

    fn leaf(&mut self, ty: u32, ne: [i64; 4], place: Place, name: &str) -> T {
        let birth = self.nodes.len();
        self.push(Tensor {
            ty,
            ne,
            nb: contiguous_nb(ty, ne),
            op: Op::None,
            params: [0; 16],
            src: Vec::new(),
            place,
            birth,
            name: name.to_string(),
        })
    }

    /// A tensor already in a worker buffer (`buffer`'s handle) at address `addr`.
    pub fn fixed(&mut self, ty: u32, ne: [i64; 4], buffer: u64, addr: u64, name: &str) -> T {
        self.leaf(ty, ne, Place::Fixed { buffer, addr }, name)
    }

    /// An input the client writes before the graph runs.
    pub fn input(&mut self, ty: u32, ne: [i64; 4], name: &str) -> T {
        self.leaf(ty, ne, Place::Kept, name)
    }

    /// Compute-buffer room that nodes write into (the target of `set_rows`).
    pub fn scratch(&mut self, ty: u32, ne: [i64; 4], name: &str) -> T {
        self.leaf(ty, ne, Place::Temp, name)
    }

    /// Keeps `t` for the whole pass (the output read back).
    pub fn keep(&mut self, t: T) {
        let r = self.root(t);
        self.tensors[r].place = Place::Kept;
    }

    /// A node computing a new contiguous tensor.
    fn node(&mut self, op: Op, ty: u32, ne: [i64; 4], src: Vec<T>, params: &[i32]) -> T {
        let birth = self.nodes.len();
        let t = self.push(Tensor {
            ty,
            ne,
            nb: contiguous_nb(ty, ne),
            op,
            params: params_of(params),
            src,
            place: Place::Temp,
            birth,
            name: String::new(),
        });
        self.nodes.push(t);
        t
    }

    /// A node whose result aliases `of`'s bytes from `offs` (a view, reshape, permute, or an op
    /// that writes in place).
    #[allow(clippy::too_many_arguments)]
    fn view_node(
        &mut self,
        op: Op,
        of: T,
        offs: u64,
        ne: [i64; 4],
        nb: [u64; 4],
        src: Vec<T>,
        params: &[i32],
    ) -> T {
        let (root, base) = match self.tensors[of].place {
            Place::View { root, offs } => (root, offs),
            _ => (of, 0),
        };
        let birth = self.nodes.len();
        let ty = self.tensors[of].ty;
        let t = self.push(Tensor {
            ty,
            ne,
            nb,
            op,
            params: params_of(params),
            src,
            place: Place::View {
                root,
                offs: base + offs,
            },
            birth,
            name: String::new(),
        });
        self.nodes.push(t);
        t
    }

    fn root(&self, t: T) -> T {
        match self.tensors[t].place {
            Place::View { root, .. } => root,
            _ => t,
        }
    }

    /// The sizes of `t`.
    pub fn ne(&self, t: T) -> [i64; 4] {
        self.tensors[t].ne
    }

    /// Names `t` (for the worker's logs).
    pub fn name(&mut self, t: T, name: &str) {
        self.tensors[t].name = name.to_string();
    }

    pub fn rms_norm(&mut self, a: T, eps: f32) -> T {
        let ne = self.ne(a);
        self.node(Op::RmsNorm, F32, ne, vec![a], &[eps.to_bits() as i32])
    }

    pub fn mul(&mut self, a: T, b: T) -> T {
        let ne = self.ne(a);
        self.node(Op::Mul, F32, ne, vec![a, b], &[])
    }

    pub fn add(&mut self, a: T, b: T) -> T {
        let ne = self.ne(a);
        self.node(Op::Add, F32, ne, vec![a, b], &[])
    }

    /// `a` (`[k, m]`, a weight) times `b` (`[k, n]`): `[m, n]`.
    pub fn mul_mat(&mut self, a: T, b: T) -> T {
        let (na, nb) = (self.ne(a), self.ne(b));
        self.node(
            Op::MulMat,
            F32,
            [na[1], nb[1], nb[2], nb[3]],
            vec![a, b],
            &[],
        )
    }

    /// The same bytes seen with sizes `ne` (`a` contiguous).
    pub fn reshape(&mut self, a: T, ne: [i64; 4]) -> T {
        let ty = self.tensors[a].ty;
        self.view_node(Op::Reshape, a, 0, ne, contiguous_nb(ty, ne), vec![a], &[])
    }

    /// A strided view of `a` from byte `offs`.
    pub fn view(&mut self, a: T, ne: [i64; 4], nb: [u64; 4], offs: u64) -> T {
        let p = [offs as u32 as i32, (offs >> 32) as u32 as i32];
        self.view_node(Op::View, a, offs, ne, nb, vec![a], &p)
    }

    /// `a` with its axes moved: axis `i` becomes axis `axes[i]`.
    pub fn permute(&mut self, a: T, axes: [usize; 4]) -> T {
        let (ne0, nb0) = (self.ne(a), self.tensors[a].nb);
        let (mut ne, mut nb) = ([0i64; 4], [0u64; 4]);
        for i in 0..4 {
            ne[axes[i]] = ne0[i];
            nb[axes[i]] = nb0[i];
        }
        let p = axes.map(|x| x as i32);
        self.view_node(Op::Permute, a, 0, ne, nb, vec![a], &p)
    }

    /// Rotary embedding of `a` (`[head_dim, heads, tokens]`) at positions `pos` (i32, one per
    /// token), with optional frequency factors `factors`.
    pub fn rope(&mut self, a: T, pos: T, factors: Option<T>, r: &RopeParams) -> T {
        let ne = self.ne(a);
        let mut src = vec![a, pos];
        if let Some(f) = factors {
            src.push(f);
        }
        let f = |v: f32| v.to_bits() as i32;
        let p = [
            0,
            r.n_dims,
            r.mode,
            0,
            r.n_ctx_orig,
            f(r.freq_base),
            f(r.freq_scale),
            f(r.ext_factor),
            f(r.attn_factor),
            f(r.beta_fast),
            f(r.beta_slow),
        ];
        let t = self.node(Op::Rope, F32, ne, src, &p);
        if factors.is_none() {
            // ggml keeps the slot of the absent factors tensor empty.
            self.tensors[t].src.truncate(2);
        }
        t
    }

    /// Rows `idx` (i32) of `a`, as f32.
    pub fn get_rows(&mut self, a: T, idx: T) -> T {
        let (na, ni) = (self.ne(a), self.ne(idx));
        let ty = if self.tensors[a].ty == I32 { I32 } else { F32 };
        self.node(
            Op::GetRows,
            ty,
            [na[0], ni[0], ni[1], ni[2]],
            vec![a, idx],
            &[],
        )
    }

    /// Writes the rows of `src` into rows `idx` (i32) of `dst`, converting to `dst`'s type;
    /// the result is `dst` after the write.
    pub fn set_rows(&mut self, dst: T, src: T, idx: T) -> T {
        let (ne, nb) = (self.ne(dst), self.tensors[dst].nb);
        self.view_node(Op::SetRows, dst, 0, ne, nb, vec![src, idx, dst], &[])
    }

    /// ggml's `flash_attn_ext`: `q` `[d, n_q, heads]`, `k`/`v` `[d, n_kv, kv_heads]` (f16),
    /// `mask` `[n_kv, n_q]` (f16); the result is `[d, heads, n_q]`.
    pub fn flash_attn(&mut self, q: T, k: T, v: T, mask: T, scale: f32, softcap: f32) -> T {
        let (nq, nv) = (self.ne(q), self.ne(v));
        let f = |v: f32| v.to_bits() as i32;
        // GGML_PREC_F32 in the fourth parameter, as llama.cpp sets it.
        let p = [f(scale), f(0.0), f(softcap), 10];
        self.node(
            Op::FlashAttnExt,
            F32,
            [nv[0], nq[2], nq[1], nq[3]],
            vec![q, k, v, mask],
            &p,
        )
    }

    /// `silu(a) * b` (ggml's `swiglu_split`).
    pub fn swiglu(&mut self, a: T, b: T) -> T {
        let ne = self.ne(a);
        self.node(Op::Glu, F32, ne, vec![a, b], &[ops::GLU_SWIGLU, 0])
    }

    /// `gelu(a) * b` (ggml's `geglu_split`).
    pub fn geglu(&mut self, a: T, b: T) -> T {
        let ne = self.ne(a);
        self.node(Op::Glu, F32, ne, vec![a, b], &[ops::GLU_GEGLU, 0])
    }

    /// Lays the graph out in a compute buffer whose addresses start at 0 (first fit in node
    /// order, each block rounded up to `align`).
    pub fn plan(self, align: u64) -> Planned {
        let n = self.tensors.len();
        let mut death = vec![0usize; n];
        for (i, &t) in self.nodes.iter().enumerate() {
            let r = self.root(t);
            death[r] = death[r].max(i);
            for &s in &self.tensors[t].src {
                let r = self.root(s);
                death[r] = death[r].max(i);
            }
        }
        let mut births: Vec<T> = (0..n)
            .filter(|&t| matches!(self.tensors[t].place, Place::Kept | Place::Temp))
            .collect();
        births.sort_by_key(|&t| self.tensors[t].birth);
        let mut offsets = vec![0u64; n];
        let mut free: Vec<(u64, u64)> = Vec::new();
        let mut live: Vec<T> = Vec::new();
        let mut top = 0u64;
        for t in births {
            let at = self.tensors[t].birth;
            // Tensors whose last reader ran before this one's node give their bytes back.
            let (dead, still): (Vec<T>, Vec<T>) = live
                .into_iter()
                .partition(|&d| matches!(self.tensors[d].place, Place::Temp) && death[d] < at);
            live = still;
            for d in dead {
                let len = self.size_of(d, align);
                release(&mut free, offsets[d], len);
            }
            let len = self.size_of(t, align);
            let off = match free.iter().position(|&(_, l)| l >= len) {
                Some(i) => {
                    let (o, l) = free[i];
                    if l == len {
                        free.remove(i);
                    } else {
                        free[i] = (o + len, l - len);
                    }
                    o
                }
                None => {
                    let o = top;
                    top += len;
                    o
                }
            };
            offsets[t] = off;
            live.push(t);
        }
        Planned {
            size: top.max(align),
            offsets,
            graph: self,
        }
    }

    fn size_of(&self, t: T, align: u64) -> u64 {
        let x = &self.tensors[t];
        nbytes(x.ty, x.ne).div_ceil(align) * align
    }
}

/// Returns `[off, off + len)` to the sorted free list, merging neighbours.
fn release(free: &mut Vec<(u64, u64)>, off: u64, len: u64) {
    let i = free.partition_point(|&(o, _)| o < off);
    free.insert(i, (off, len));
    if i + 1 < free.len() && free[i].0 + free[i].1 == free[i + 1].0 {
        free[i].1 += free[i + 1].1;
        free.remove(i + 1);
    }
    if i > 0 && free[i - 1].0 + free[i - 1].1 == free[i].0 {
        free[i - 1].1 += free[i].1;
        free.remove(i);
    }
}

/// ggml's tensor flags: every node is marked to be computed (ggml skips nodes without
/// `GGML_TENSOR_FLAG_COMPUTE`), inputs and the kept output as such.
fn flags(x: &Tensor) -> i32 {
    const INPUT: i32 = 1;
    const OUTPUT: i32 = 2;
    const COMPUTE: i32 = 16;
    match (x.op, &x.place) {
        (Op::None, Place::Kept) => INPUT,
        (Op::None, _) => 0,
        (_, Place::Kept) => COMPUTE | OUTPUT,
        _ => COMPUTE,
    }
}

/// The parameters of a `rope` node (ggml's `ggml_rope_ext`).
#[derive(Clone, Debug)]
pub struct RopeParams {
    pub n_dims: i32,
    /// 0: adjacent pairs; 2: NeoX halves.
    pub mode: i32,
    pub n_ctx_orig: i32,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
}

impl Planned {
    /// Tensor `t` as the wire names it, with the compute buffer `buffer` at address `base`.
    pub fn wire(&self, t: T, buffer: u64, base: u64) -> WireTensor {
        let g = &self.graph;
        let x = &g.tensors[t];
        let (buf, data, view_src, view_offs) = match x.place {
            Place::Fixed { buffer, addr } => (buffer, addr, 0, 0),
            Place::Kept | Place::Temp => (buffer, base + self.offsets[t], 0, 0),
            Place::View { root, offs } => {
                let r = self.wire(root, buffer, base);
                (r.buffer, r.data + offs, root as u64 + 1, offs)
            }
        };
        let mut src = [0u64; MAX_SRC];
        for (i, &s) in x.src.iter().enumerate() {
            src[i] = s as u64 + 1;
        }
        WireTensor {
            id: t as u64 + 1,
            ty: x.ty,
            buffer: buf,
            ne: x.ne.map(|v| v as u32),
            nb: x.nb.map(|v| v as u32),
            op: x.op as u32,
            op_params: x.params,
            flags: flags(x),
            src,
            view_src,
            view_offs,
            data,
            name: x.name.clone(),
            use_count: 0,
        }
    }

    /// The graph as `GRAPH_COMPUTE` carries it, for device `dev`: the nodes in order, then
    /// every tensor they reach (sources before the tensors that read them).
    pub fn serialize(&self, dev: u32, buffer: u64, base: u64) -> Vec<u8> {
        let g = &self.graph;
        let mut uses = vec![0i32; g.tensors.len()];
        for &t in &g.nodes {
            for &s in &g.tensors[t].src {
                uses[s] += 1;
            }
        }
        let mut order = Vec::new();
        let mut seen = vec![false; g.tensors.len()];
        for &t in &g.nodes {
            self.visit(t, &mut seen, &mut order);
        }
        let mut out = Vec::new();
        out.extend_from_slice(&dev.to_le_bytes());
        out.extend_from_slice(&(g.nodes.len() as u32).to_le_bytes());
        for &t in &g.nodes {
            out.extend_from_slice(&(t as u64 + 1).to_le_bytes());
        }
        out.extend_from_slice(&(order.len() as u32).to_le_bytes());
        for t in order {
            let mut w = self.wire(t, buffer, base);
            w.use_count = uses[t];
            w.write(&mut out);
        }
        out
    }

    fn visit(&self, t: T, seen: &mut [bool], order: &mut Vec<T>) {
        if seen[t] {
            return;
        }
        seen[t] = true;
        let x = &self.graph.tensors[t];
        for &s in &x.src {
            self.visit(s, seen, order);
        }
        if let Place::View { root, .. } = x.place {
            self.visit(root, seen, order);
        }
        order.push(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides_follow_ggml_blocks() {
        assert_eq!(contiguous_nb(F32, [4, 3, 2, 1]), [4, 16, 48, 96]);
        // q4_1: 20 bytes per 32 values.
        assert_eq!(contiguous_nb(3, [64, 2, 1, 1]), [20, 40, 80, 80]);
        assert_eq!(nbytes(F16, [8, 2, 1, 1]), 32);
    }

    #[test]
    fn temporaries_reuse_bytes_once_their_last_reader_ran() {
        let mut g = Graph::default();
        let x = g.input(F32, [16, 1, 1, 1], "x");
        let a = g.rms_norm(x, 1e-5); // 64 bytes
        let b = g.rms_norm(a, 1e-5); // a still read here
        let c = g.rms_norm(b, 1e-5); // a is dead: its bytes are free again
        g.keep(c);
        let p = g.plan(64);
        let off = |t| p.wire(t, 1, 0).data;
        assert_eq!(off(x), 0);
        assert_ne!(off(a), off(b));
        assert_eq!(off(c), off(a));
        assert_eq!(p.size, 3 * 64);
    }

    #[test]
    fn views_alias_their_root_and_keep_it_alive() {
        let mut g = Graph::default();
        let x = g.input(F32, [8, 2, 1, 1], "x");
        let a = g.rms_norm(x, 1e-5);
        let r = g.reshape(a, [4, 4, 1, 1]);
        let p1 = g.permute(r, [0, 2, 1, 3]);
        let y = g.rms_norm(x, 1e-5);
        let z = g.add(p1, y);
        g.keep(z);
        let p = g.plan(32);
        let (wa, wr, wp) = (p.wire(a, 9, 1000), p.wire(r, 9, 1000), p.wire(p1, 9, 1000));
        assert_eq!((wr.data, wp.data), (wa.data, wa.data));
        assert_eq!(wp.view_src, a as u64 + 1);
        assert_eq!(wp.ne, [4, 1, 4, 1]);
        assert_eq!(wp.nb, [4, 64, 16, 64]);
        // `a` is read (through the permute) by the last node: `y` cannot take its bytes.
        assert_ne!(p.wire(y, 9, 1000).data, wa.data);
        let bytes = p.serialize(0, 9, 1000);
        let n_nodes = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
        assert_eq!(n_nodes, 5);
    }
}
