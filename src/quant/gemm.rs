//! Batched products for the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): the activation
//! rows of a batch, already quantized to the weight type's partner format, are repacked once
//! per matrix product so that tile kernels can work on two tokens per 512-bit vector (AVX2
//! kernels read one token's 256-bit half, NEON kernels its 32 quants and first scale lane), and
//! then tiles of weight rows × tokens are computed by the SIMD variant in use.
//!
//! Every product keeps [`super::vec_dot`]'s float operations and order (the tile kernels only
//! run several of them side by side), so results are bit-identical to the single-row path.
//!
//! Packed layout, for token pairs `p` (tokens `2p`, `2p + 1`; an odd batch gets an all-zero
//! partner) and blocks `b`:
//! - `qs[p][b]`: the two tokens' 32 quants, 64 bytes;
//! - `d[p][b]`: the two scales as f32, each repeated 8 times (one per i32 lane of a token);
//! - `corr[p][b]`: for weight formats stored with an offset (`q - off`), `-off` times the sum of
//!   each group of four activation quants, so `corr + Σ (q + off)·y` is the signed dot product
//!   (x86 only: the NEON kernels decode weights to signed values, and there `corr` stays empty);
//! - `s[b][t]`: Q8_1's `d·Σy` as f32 per token (formats with a minimum).
//!
//! K-quant weights (Q8_K partners) keep the quantized rows as they are: their tile kernels read
//! whole super-blocks per token.

use super::block::{as_blocks, f16_to_f32};
use super::dispatch;
use super::q8_0::BlockQ8_0;
use super::q8_1::BlockQ8_1;
use super::q8_k::BlockQ8K;
use super::GgmlType;

/// Bytes of one token pair's quants for one block.
pub(crate) const PAIR_QS: usize = 64;
/// Lanes (f32 or i32) of one token pair's scales or corrections for one block.
pub(crate) const PAIR_LANES: usize = 16;
/// Tokens per group in the token-across-lanes layout (`tq`).
pub(crate) const TOKEN_GROUP: usize = 16;

/// Floats of slack after each block's `s` row, so kernels can read whole vectors.
const S_SLACK: usize = 16;

/// Activation rows of one batch, repacked for [`gemm`].
pub struct PackedActs {
    pub(crate) ty: GgmlType,
    pub(crate) n_blocks: usize,
    pub(crate) n_tokens: usize,
    /// Length of one block's row in `s`.
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    pub(crate) s_stride: usize,
    pub(crate) qs: Vec<u8>,
    pub(crate) d: Vec<f32>,
    pub(crate) corr: Vec<i32>,
    pub(crate) s: Vec<f32>,
    /// K-quant partners (Q8_K): the quantized rows as they are, `raw_stride` bytes each.
    pub(crate) raw: Vec<u8>,
    pub(crate) raw_stride: usize,
    /// Q4_K partners: tokens in groups of [`TOKEN_GROUP`], per super-block and per four quants
    /// the group's sixteen four-byte pieces side by side (`tq`), the tokens' scales (`td`) and
    /// the sums of their bsum pairs as i32 (`tps`, eight per super-block).
    pub(crate) tq: Vec<u8>,
    pub(crate) td: Vec<f32>,
    pub(crate) tps: Vec<i32>,
    /// Q6_K partners: 32 times each bsum (sum of 16 quants) as i32, sixteen per super-block,
    /// tokens side by side as in `tq`.
    pub(crate) tbs: Vec<i32>,
    /// F16 and BF16 partners: each token's row widened to f32 (`n_blocks` floats, one per
    /// element), an odd batch padded with a zero row.
    pub(crate) half: Vec<f32>,
}

impl PackedActs {
    /// Token pairs held (the last may be half padding).
    pub fn n_pairs(&self) -> usize {
        self.n_tokens.div_ceil(2)
    }

    /// Tokens held.
    pub fn n_tokens(&self) -> usize {
        self.n_tokens
    }

    /// Where token `tok`'s quants start in `qs` (its pair's first slot, its half).
    #[inline(always)]
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    pub(crate) fn qs_start(&self, tok: usize) -> usize {
        tok / 2 * self.n_blocks * PAIR_QS + tok % 2 * 32
    }

    /// Where token `tok`'s lanes start in `d` and `corr` (its pair's first slot, its half).
    #[inline(always)]
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    pub(crate) fn lanes_start(&self, tok: usize) -> usize {
        tok / 2 * self.n_blocks * PAIR_LANES + tok % 2 * 8
    }

    /// Pair ranges handed to [`gemm`] should start at multiples of this (token groups).
    pub fn pair_align(&self) -> usize {
        if self.tq.is_empty() {
            1
        } else {
            TOKEN_GROUP / 2
        }
    }
}

/// The offset a weight format stores its quants with (`value = q - off`); 0 for formats with a
/// minimum, whose quants are unsigned already.
pub(crate) fn weight_offset(ty: GgmlType) -> i32 {
    match ty {
        GgmlType::Q4_0 => 8,
        GgmlType::Q5_0 => 16,
        GgmlType::Q8_0 => 128,
        _ => 0,
    }
}

/// Pair ranges handed to [`gemm`] for weights of `ty` should start at multiples of this (see
/// [`PackedActs::pair_align`]); a batch packed in parts should be cut there.
pub fn pair_align(ty: GgmlType) -> usize {
    if lane_packed(ty) {
        TOKEN_GROUP / 2
    } else {
        1
    }
}

/// Whether the kernels in use have a tile kernel for weights of `ty`.
pub fn has_gemm(ty: GgmlType) -> bool {
    dispatch::kernels().gemm[dispatch::slot(ty)].is_some()
}

/// Fewest activation rows for which the tile kernel is used instead of the multi-row dot
/// products: the AVX-512 K-quant tiles compute whole groups of sixteen tokens, the others
/// (32-element formats, AVX2 and NEON K-quant tiles) at most four tokens at a time. Measured on
/// AVX-512 and AVX2; NEON takes the same threshold unmeasured (no ARM hardware, qemu timings
/// mean nothing).
pub fn min_gemm_tokens(ty: GgmlType) -> usize {
    if lane_packed(ty) {
        8
    } else {
        2
    }
}

/// Whether the kernels in use read `ty`'s activations in token groups (`tq`): the AVX-512 tiles
/// for Q4_K and Q6_K. The AVX2 and NEON ones read the Q8_K rows as they are.
fn lane_packed(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4K | GgmlType::Q6K)
        && has_gemm(ty)
        && dispatch::kernels().name == "avx512"
}

/// Repacks `n_tokens` activation rows (`acts`, each `n` elements quantized to
/// `ty.vec_dot_type()`, back to back) for weights of `ty`.
///
/// Panics if `ty` is not one of the 32-element weight formats or the lengths disagree.
pub fn pack_acts(ty: GgmlType, n: usize, acts: &[u8], n_tokens: usize) -> PackedActs {
    let at = ty.vec_dot_type();
    if widens_acts(ty) {
        return pack_half(ty, n, acts, n_tokens);
    }
    if at == GgmlType::Q8K {
        let stride = at.bytes_for(n as u64).expect("whole super-blocks") as usize;
        assert_eq!(acts.len(), stride * n_tokens, "pack_acts: activation bytes");
        let mut p = PackedActs {
            ty,
            n_blocks: n / at.block_elems(),
            n_tokens,
            s_stride: 0,
            qs: Vec::new(),
            d: Vec::new(),
            corr: Vec::new(),
            s: Vec::new(),
            raw: acts.to_vec(),
            raw_stride: stride,
            tq: Vec::new(),
            td: Vec::new(),
            tps: Vec::new(),
            tbs: Vec::new(),
            half: Vec::new(),
        };
        if lane_packed(ty) {
            p.pack_token_groups();
        }
        return p;
    }
    assert!(
        matches!(at, GgmlType::Q8_0 | GgmlType::Q8_1) && n.is_multiple_of(32),
        "pack_acts: {ty} with n={n}"
    );
    let nb = n / 32;
    let row_bytes = nb * at.block_bytes();
    assert_eq!(
        acts.len(),
        row_bytes * n_tokens,
        "pack_acts: activation bytes"
    );
    let pairs = n_tokens.div_ceil(2);
    // Only the x86 kernels read the corrections.
    let off = if cfg!(target_arch = "x86_64") {
        weight_offset(ty)
    } else {
        0
    };
    let s_stride = (2 * pairs).next_multiple_of(16) + S_SLACK;
    let mut p = PackedActs {
        ty,
        n_blocks: nb,
        n_tokens,
        s_stride,
        qs: vec![0; pairs * nb * PAIR_QS],
        d: vec![0.0; pairs * nb * PAIR_LANES],
        corr: if off != 0 {
            vec![0; pairs * nb * PAIR_LANES]
        } else {
            Vec::new()
        },
        s: if at == GgmlType::Q8_1 {
            vec![0.0; nb * s_stride]
        } else {
            Vec::new()
        },
        raw: Vec::new(),
        raw_stride: 0,
        tq: Vec::new(),
        td: Vec::new(),
        tps: Vec::new(),
        tbs: Vec::new(),
        half: Vec::new(),
    };
    for (t, row) in acts.chunks_exact(row_bytes).enumerate() {
        let (pair, half) = (t / 2, t % 2);
        for b in 0..nb {
            let (d, s, qs) = if at == GgmlType::Q8_1 {
                let blk = &as_blocks::<BlockQ8_1>(row)[b];
                (blk.d, Some(blk.s), &blk.qs)
            } else {
                let blk = &as_blocks::<BlockQ8_0>(row)[b];
                (blk.d, None, &blk.qs)
            };
            let slot = pair * nb + b;
            let q = &mut p.qs[slot * PAIR_QS + half * 32..][..32];
            q.iter_mut().zip(qs).for_each(|(dst, &v)| *dst = v as u8);
            let lanes = slot * PAIR_LANES + half * 8;
            p.d[lanes..lanes + 8].fill(f16_to_f32(d));
            if off != 0 {
                for (i, c) in p.corr[lanes..lanes + 8].iter_mut().enumerate() {
                    *c = -off * qs[4 * i..4 * i + 4].iter().map(|&v| v as i32).sum::<i32>();
                }
            }
            if let Some(s) = s {
                p.s[b * s_stride + t] = f16_to_f32(s);
            }
        }
    }
    p
}

/// [`pack_acts`] for F16 and BF16 weights: the rows widened to f32 (exact).
fn pack_half(ty: GgmlType, n: usize, acts: &[u8], n_tokens: usize) -> PackedActs {
    assert_eq!(acts.len(), 2 * n * n_tokens, "pack_acts: activation bytes");
    let mut half = vec![0f32; n * n_tokens.next_multiple_of(2)];
    for (src, dst) in acts.chunks_exact(2 * n).zip(half.chunks_exact_mut(n)) {
        super::dequantize_row(ty, src, dst);
    }
    pack_widened(ty, n, half, n_tokens)
}

/// Whether weights of `ty` meet their activations widened back to f32 ([`pack_widened`]):
/// F16 and BF16.
pub fn widens_acts(ty: GgmlType) -> bool {
    matches!(ty.vec_dot_type(), GgmlType::F16 | GgmlType::BF16)
}

/// `src` rounded to `ty`'s activation format (F16 or BF16) and widened back to f32 in `dst`:
/// the row [`pack_acts`] would hold after [`quantize_row`](super::quantize_row).
///
/// Panics if `ty` does not [`widen_acts`](widens_acts) or the lengths disagree.
pub fn round_trip_row(ty: GgmlType, src: &[f32], dst: &mut [f32], scratch: &mut Vec<u8>) {
    assert!(widens_acts(ty), "round_trip_row({ty})");
    assert_eq!(src.len(), dst.len(), "round_trip_row: lengths");
    let at = ty.vec_dot_type();
    #[cfg(target_arch = "x86_64")]
    let done = if at == GgmlType::F16 {
        super::x86::round_trip_f16(src, dst)
    } else {
        0
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    let (src, dst) = (&src[done..], &mut dst[done..]);
    scratch.resize(2 * src.len(), 0);
    super::quantize_row(at, src, scratch);
    super::dequantize_row(at, scratch, dst);
}

/// Activations for F16 or BF16 weights of `n` elements from rows already rounded and widened
/// ([`round_trip_row`]): `half` holds `n_tokens` rows, padded with a zero row to an even count.
///
/// Panics if `ty` does not [`widen_acts`](widens_acts) or `half` is not that long.
pub fn pack_widened(ty: GgmlType, n: usize, half: Vec<f32>, n_tokens: usize) -> PackedActs {
    assert!(widens_acts(ty), "pack_widened({ty})");
    assert_eq!(
        half.len(),
        n * n_tokens.next_multiple_of(2),
        "pack_widened: rows"
    );
    PackedActs {
        ty,
        n_blocks: n,
        n_tokens,
        s_stride: 0,
        qs: Vec::new(),
        d: Vec::new(),
        corr: Vec::new(),
        s: Vec::new(),
        raw: Vec::new(),
        raw_stride: 0,
        tq: Vec::new(),
        td: Vec::new(),
        tps: Vec::new(),
        tbs: Vec::new(),
        half,
    }
}

impl PackedActs {
    /// Builds `tq`, `td` and `tps` (Q4_K) or `tbs` (Q6_K) from the Q8_K rows in `raw` (see the field docs).
    fn pack_token_groups(&mut self) {
        let nsb = self.n_blocks;
        let groups = self.n_tokens.div_ceil(TOKEN_GROUP);
        self.tq = vec![0; groups * nsb * 256 * TOKEN_GROUP];
        self.td = vec![0.0; groups * nsb * TOKEN_GROUP];
        let q4k = self.ty == GgmlType::Q4K;
        if q4k {
            self.tps = vec![0; groups * nsb * 8 * TOKEN_GROUP];
        } else {
            self.tbs = vec![0; groups * nsb * 16 * TOKEN_GROUP];
        }
        for t in 0..self.n_tokens {
            let row = &self.raw[t * self.raw_stride..][..self.raw_stride];
            let (g, lane) = (t / TOKEN_GROUP, t % TOKEN_GROUP);
            for (sb, y) in as_blocks::<BlockQ8K>(row).iter().enumerate() {
                let slot = g * nsb + sb;
                let base = slot * 256 * TOKEN_GROUP + 4 * lane;
                for (k, four) in y.qs.chunks_exact(4).enumerate() {
                    let at = base + k * 4 * TOKEN_GROUP;
                    for (dst, &v) in self.tq[at..at + 4].iter_mut().zip(four) {
                        *dst = v as u8;
                    }
                }
                self.td[slot * TOKEN_GROUP + lane] = y.d();
                if q4k {
                    for grp in 0..8 {
                        self.tps[(slot * 8 + grp) * TOKEN_GROUP + lane] =
                            y.bsum(2 * grp) + y.bsum(2 * grp + 1);
                    }
                } else {
                    for grp in 0..16 {
                        self.tbs[(slot * 16 + grp) * TOKEN_GROUP + lane] = 32 * y.bsum(grp);
                    }
                }
            }
        }
    }
}

/// Packs one activation row for [`matvec`]: the token in both halves of pair 0 (16-bit formats:
/// its widened row alone).
///
/// Panics as [`pack_acts`] does.
pub fn pack_single(ty: GgmlType, n: usize, act: &[u8]) -> PackedActs {
    if matches!(ty.vec_dot_type(), GgmlType::F16 | GgmlType::BF16) {
        // The 16-bit kernels read the token's own f32 row; no partner copy to widen.
        return pack_half(ty, n, act, 1);
    }
    let mut twice = Vec::with_capacity(2 * act.len());
    twice.extend_from_slice(act);
    twice.extend_from_slice(act);
    let mut p = pack_acts(ty, n, &twice, 2);
    p.n_tokens = 1;
    p
}

/// Whether the kernels in use have a matrix-vector kernel for weights of `ty`.
pub fn has_matvec(ty: GgmlType) -> bool {
    dispatch::kernels().matvec[dispatch::slot(ty)].is_some()
}

/// `out[r] = vec_dot(W[r], act)` for the `out.len()` weight rows in `w` and the token packed by
/// [`pack_single`].
///
/// Panics if the kernels in use have no such kernel ([`has_matvec`]) or the lengths disagree.
pub fn matvec(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    let ty = acts.ty;
    let row_bytes = acts.n_blocks * ty.block_bytes();
    assert_eq!(w.len(), out.len() * row_bytes, "matvec({ty}): weight bytes");
    let f = dispatch::kernels().matvec[dispatch::slot(ty)]
        .unwrap_or_else(|| panic!("matvec: no kernel for {ty}"));
    f(w, acts, out);
}

/// `out[t * t_stride + r * r_stride] = vec_dot(W[r], act[t])` for the `rows` weight rows in `w`
/// (`n` elements of `acts.ty` each, back to back) and the tokens of pairs
/// `pairs.start..pairs.end` (`t` counts from the first token of the range; a padding token is
/// not written).
///
/// Panics if the kernels in use have no tile kernel for the type ([`has_gemm`]) or the lengths
/// disagree.
pub fn gemm(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: std::ops::Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    let ty = acts.ty;
    let row_bytes = acts.n_blocks * ty.block_bytes();
    assert_eq!(w.len(), rows * row_bytes, "gemm({ty}): weight bytes");
    assert!(pairs.end <= acts.n_pairs(), "gemm: pairs out of range");
    let tokens = (2 * pairs.end).min(acts.n_tokens) - 2 * pairs.start;
    if rows == 0 || tokens == 0 {
        return;
    }
    let last = (tokens - 1) * t_stride + (rows - 1) * r_stride;
    assert!(out.len() > last, "gemm: output too short");
    let f = dispatch::kernels().gemm[dispatch::slot(ty)]
        .unwrap_or_else(|| panic!("gemm: no tile kernel for {ty}"));
    f(w, rows, acts, pairs, out, t_stride, r_stride);
}
