//! Softmax attention over all of an image's positions (no mask, no rotary embedding): each
//! query's scores fused-multiply-added over the head's columns in order, ggml's vectorised
//! `expf`, the softmax sums in f64, values added in key order; tiles of queries × keys held in
//! registers, threaded on the pool, the same bits on every CPU variant.

use super::layers::{with_isa, IsaBody};
use crate::cpu::Isa;
use crate::ops::expf::expf_ggml;
use crate::pool;

/// Queries handled by one task of [`attention`].
const QUERY_BLOCK: usize = 32;
/// Queries computed side by side in one register tile (divides [`QUERY_BLOCK`]).
const QUERY_TILE: usize = 4;
/// Keys are padded to a multiple of this (the narrowest key tile).
const KEY_PAD: usize = 16;

/// Multi-head self-attention over `n` positions: `q`, `k`, `v` are `n × (n_head · d)`, head `h`
/// in columns `h·d..(h+1)·d`; the result has the same layout. Every position sees every other.
///
/// Each task takes one head and a block of queries, [`QUERY_TILE`] queries at a time. A
/// query's scores are fused-multiply-added over the head's columns in order, all keys side by
/// side (the head's keys transposed once, so the loop runs along the keys); the softmax takes
/// ggml's vectorised `expf` and sums in f64 (as ggml's soft_max does, in eight running sums);
/// the output adds each value row, scaled by its weight, in key order. Every step is the same operation per lane whatever the vector width or tile, so
/// every CPU variant gives the same bits; the variant only sets the width the loops are
/// compiled for.
pub fn attention(q: &[f32], k: &[f32], v: &[f32], n: usize, n_head: usize, scale: f32) -> Vec<f32> {
    cross_attention(q, k, v, n, n_head, scale)
}

/// Multi-head attention of `q`'s rows over the `n` rows of `k` and `v` (all `n_head · d`
/// wide), the queries as many as `q` holds: [`attention`]'s steps and bits, for a set of
/// learned queries reading an image (MiniCPM-V's resampler).
pub fn cross_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n: usize,
    n_head: usize,
    scale: f32,
) -> Vec<f32> {
    let mut out = Vec::new();
    attention_into(
        q,
        k,
        v,
        n,
        n_head,
        scale,
        &mut AttentionBuffers::default(),
        &mut out,
    );
    out
}

/// The working memory of [`attention_into`], kept from call to call of a pass (a tower's
/// blocks), so that its pages are faulted in once.
#[derive(Default)]
pub struct AttentionBuffers {
    /// Each head's keys transposed.
    kt: Vec<f32>,
    /// The results head by head.
    by_head: Vec<f32>,
}

/// [`cross_attention`] into `out` (resized; every value written), its working memory in `bufs`.
#[allow(clippy::too_many_arguments)]
pub fn attention_into(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n: usize,
    n_head: usize,
    scale: f32,
    bufs: &mut AttentionBuffers,
    out: &mut Vec<f32>,
) {
    attention_with(crate::cpu::isa(), q, k, v, n, n_head, scale, bufs, out)
}

/// [`attention_into`] with the kernels of `isa` (which this CPU must support).
#[allow(clippy::too_many_arguments)]
fn attention_with(
    isa: Isa,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n: usize,
    n_head: usize,
    scale: f32,
    bufs: &mut AttentionBuffers,
    out: &mut Vec<f32>,
) {
    let width = k.len() / n;
    let d = width / n_head;
    let n_query = q.len() / width;
    let n_pad = n.next_multiple_of(KEY_PAD);
    // Each head's keys transposed (`d × n_pad`, the padding keys zero).
    let kt = &mut bufs.kt;
    kt.resize(n_head * d * n_pad, 0.0);
    pool::global().for_each_chunk(kt, d * n_pad, |h, kt| {
        for j in 0..n {
            for (c, &x) in k[j * width + h * d..][..d].iter().enumerate() {
                kt[c * n_pad + j] = x;
            }
        }
        for c in 0..d {
            kt[c * n_pad + n..(c + 1) * n_pad].fill(0.0);
        }
    });
    let kt = &bufs.kt;
    let blocks = n_query.div_ceil(QUERY_BLOCK);
    // Head-major scratch, each head padded to whole query blocks, so that one task owns one
    // contiguous chunk: (head, block) = divmod(task, blocks).
    let padded = blocks * QUERY_BLOCK;
    let by_head = &mut bufs.by_head;
    by_head.resize(n_head * padded * d, 0.0);
    let zero_query = vec![0f32; d];
    pool::global().for_each_chunk(by_head, QUERY_BLOCK * d, |task, out| {
        let (h, blk) = (task / blocks, task % blocks);
        let head = Head {
            kt: &kt[h * d * n_pad..][..d * n_pad],
            n_pad,
            n,
            v,
            width,
            col: h * d,
            scale,
        };
        let mut scores = vec![0f32; QUERY_TILE * n_pad];
        for (tile, dst) in out.chunks_exact_mut(QUERY_TILE * d).enumerate() {
            let q0 = blk * QUERY_BLOCK + tile * QUERY_TILE;
            if q0 >= n_query {
                break;
            }
            // Queries past the last position (the block's padding) are zero rows, their
            // results never read.
            let qs: [&[f32]; QUERY_TILE] = std::array::from_fn(|t| {
                let qi = q0 + t;
                if qi < n_query {
                    &q[qi * width + head.col..][..d]
                } else {
                    &zero_query[..]
                }
            });
            let tile = QueryTile {
                head: &head,
                q: qs,
                scores: &mut scores,
                dst,
            };
            with_isa(isa, tile);
        }
    });
    out.resize(n_query * width, 0.0);
    for h in 0..n_head {
        for i in 0..n_query {
            out[i * width + h * d..][..d].copy_from_slice(&by_head[(h * padded + i) * d..][..d]);
        }
    }
}

/// One head's keys (transposed, padded to `n_pad`) and values (columns `col..col + d` of
/// `v`'s `width`-wide rows) for [`query_tile`].
struct Head<'a> {
    kt: &'a [f32],
    n_pad: usize,
    n: usize,
    v: &'a [f32],
    width: usize,
    col: usize,
    scale: f32,
}

/// One query tile of [`attention`]'s task: [`query_tile`]'s arguments.
struct QueryTile<'a, 'b> {
    head: &'a Head<'b>,
    q: [&'a [f32]; QUERY_TILE],
    scores: &'a mut [f32],
    dst: &'a mut [f32],
}

impl IsaBody for QueryTile<'_, '_> {
    #[inline(always)]
    fn call(self, isa: Isa) {
        query_tile(isa, self.head, self.q, self.scores, self.dst)
    }
}

/// [`QUERY_TILE`] queries' attention over one head: scores, softmax, weighted values into
/// `dst` (the queries' `d`-wide rows back to back).
#[inline(always)]
fn query_tile(isa: Isa, head: &Head, q: [&[f32]; QUERY_TILE], scores: &mut [f32], dst: &mut [f32]) {
    let (n, n_pad) = (head.n, head.n_pad);
    scores_tile(isa, q, head.kt, n_pad, head.scale, scores);
    for row in scores.chunks_exact_mut(n_pad) {
        let row = &mut row[..n];
        let max = row.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
        let inv = (1.0 / exp_sub(isa, row, max)) as f32;
        // The weights of the values, each rounded once as before.
        for p in row {
            *p *= inv;
        }
    }
    dst.fill(0.0);
    let wide = value_tile_width(isa);
    weighted_sum_tile(wide, scores, n_pad, n, head.v, head.width, head.col, dst);
}

/// The scores of [`QUERY_TILE`] queries against every key: `scores[t][j] = (q[t] · kᵀ[·][j]) ·
/// scale`, each the sum over the query's columns in order, in key tiles as wide as the
/// registers of `isa` allow (the padding keys give zero scores).
#[inline(always)]
fn scores_tile(
    isa: Isa,
    q: [&[f32]; QUERY_TILE],
    kt: &[f32],
    n_pad: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let wide = if isa == Isa::Avx512 { 64 } else { KEY_PAD };
    let mut j0 = 0;
    while j0 < n_pad {
        if wide == 64 && j0 + 64 <= n_pad {
            key_tile::<64>(q, kt, n_pad, j0, scale, scores);
            j0 += 64;
        } else {
            key_tile::<KEY_PAD>(q, kt, n_pad, j0, scale, scores);
            j0 += KEY_PAD;
        }
    }
}

/// Keys `j0..j0 + K` of [`scores_tile`]: `QUERY_TILE × K` sums held in registers while the
/// columns pass.
#[inline(always)]
fn key_tile<const K: usize>(
    q: [&[f32]; QUERY_TILE],
    kt: &[f32],
    n_pad: usize,
    j0: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let d = q[0].len();
    let mut acc = [[0f32; K]; QUERY_TILE];
    for c in 0..d {
        let kv: &[f32; K] = kt[c * n_pad + j0..][..K].try_into().expect("K keys");
        for (a, qr) in acc.iter_mut().zip(&q) {
            let qc = qr[c];
            for (s, &x) in a.iter_mut().zip(kv) {
                *s = qc.mul_add(x, *s);
            }
        }
    }
    for (t, a) in acc.iter().enumerate() {
        for (s, &x) in scores[t * n_pad + j0..][..K].iter_mut().zip(a) {
            *s = x * scale;
        }
    }
}

/// `dst[t] += Σ_j p[t][j] · v[j]` for the tile's queries (`dst` holds their `d`-wide
/// rows back to back), keys in order, over the head's columns `col..col + d` of `v`'s rows,
/// in column tiles of at most `wide` (16, 32 or 64: the same bits).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn weighted_sum_tile(
    wide: usize,
    p: &[f32],
    n_pad: usize,
    n: usize,
    v: &[f32],
    width: usize,
    col: usize,
    dst: &mut [f32],
) {
    let d = dst.len() / QUERY_TILE;
    let mut c0 = 0;
    while c0 < d {
        let left = d - c0;
        if wide == 64 && left >= 64 {
            value_tile::<64>(p, n_pad, n, v, width, col, c0, dst);
            c0 += 64;
        } else if wide >= 32 && left >= 32 {
            value_tile::<32>(p, n_pad, n, v, width, col, c0, dst);
            c0 += 32;
        } else if left >= 16 {
            value_tile::<16>(p, n_pad, n, v, width, col, c0, dst);
            c0 += 16;
        } else {
            value_tile::<1>(p, n_pad, n, v, width, col, c0, dst);
            c0 += 1;
        }
    }
}

/// The widest value tile for `isa`: four queries' sums must stay in registers (AVX2's 16 hold
/// 16 columns, AVX-512's 32 hold 64), and on CPUs that run 512-bit operations in halves 32
/// columns measured faster (Zen 4: 1.12-1.22 ms against 1.36-1.44 for gemma3-base's
/// attention, 196 positions × 12 heads of 64, 2 threads).
fn value_tile_width(isa: Isa) -> usize {
    match isa {
        Isa::Avx512 if crate::cpu::splits_512() => 32,
        Isa::Avx512 => 64,
        _ => 16,
    }
}

/// Columns `c0..c0 + C` of [`weighted_sum_tile`], the tile's sums in registers while the keys
/// pass.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn value_tile<const C: usize>(
    p: &[f32],
    n_pad: usize,
    n: usize,
    v: &[f32],
    width: usize,
    col: usize,
    c0: usize,
    dst: &mut [f32],
) {
    let d = dst.len() / QUERY_TILE;
    let mut acc = [[0f32; C]; QUERY_TILE];
    for t in 0..QUERY_TILE {
        acc[t].copy_from_slice(&dst[t * d + c0..][..C]);
    }
    for j in 0..n {
        let vr: &[f32; C] = v[j * width + col + c0..][..C].try_into().expect("C values");
        for (t, a) in acc.iter_mut().enumerate() {
            let w = p[t * n_pad + j];
            for (o, &x) in a.iter_mut().zip(vr) {
                *o = w.mul_add(x, *o);
            }
        }
    }
    for t in 0..QUERY_TILE {
        dst[t * d + c0..][..C].copy_from_slice(&acc[t]);
    }
}

/// `x[i] = expf(x[i] - max)` with ggml's `expf`; the sum of the results in f64 ([`sum_f64`]).
#[inline(always)]
fn exp_sub(isa: Isa, x: &mut [f32], max: f32) -> f64 {
    #[allow(unused_mut)]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    match isa {
        // SAFETY: `isa` is the CPU's (cpu::isa), so it supports the features.
        Isa::Avx512 => done = unsafe { exp_x86::exp_sub16(x, max) },
        // SAFETY: as above.
        Isa::Avx2 => done = unsafe { exp_x86::exp_sub8(x, max) },
        _ => {}
    }
    let _ = isa;
    for v in &mut x[done..] {
        *v = expf_ggml(*v - max);
    }
    sum_f64(x)
}

/// The sum of `x` in f64: eight running sums (element `i` in sum `i % 8`) added pairwise at
/// the end, a loop every variant vectorises with the same bits (one sum in order would be a
/// chain of dependent f64 additions, 4 cycles each).
#[inline(always)]
fn sum_f64(x: &[f32]) -> f64 {
    let mut acc = [0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v as f64;
        }
    }
    for (a, &v) in acc.iter_mut().zip(tail) {
        *a += v as f64;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

#[cfg(target_arch = "x86_64")]
mod exp_x86 {
    use crate::ops::expf::x86::{v_expf, v_expf8};
    use std::arch::x86_64::*;

    /// [`super::exp_sub`]'s exponentials over the leading multiple of 16; returns how many.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX-512DQ.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn exp_sub16(x: &mut [f32], max: f32) -> usize {
        let n = x.len() / 16 * 16;
        let m = _mm512_set1_ps(max);
        for c in x[..n].chunks_exact_mut(16) {
            // SAFETY: the chunk holds 16 floats; unaligned load and store.
            unsafe {
                let e = v_expf(_mm512_sub_ps(_mm512_loadu_ps(c.as_ptr()), m));
                _mm512_storeu_ps(c.as_mut_ptr(), e);
            }
        }
        n
    }

    /// As [`exp_sub16`], eight lanes at a time, with its bits.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp_sub8(x: &mut [f32], max: f32) -> usize {
        let n = x.len() / 8 * 8;
        let m = _mm256_set1_ps(max);
        for c in x[..n].chunks_exact_mut(8) {
            // SAFETY: the chunk holds 8 floats; unaligned load and store.
            unsafe {
                let e = v_expf8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), m));
                _mm256_storeu_ps(c.as_mut_ptr(), e);
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attention_matches_a_naive_loop() {
        // The second shape takes the 64-key and 64-column tiles as well as the narrow ones.
        for (n, n_head, d) in [(37, 3, 4), (70, 2, 80)] {
            let w = n_head * d;
            let (q, k, v) = (gen(n * w, 3), gen(n * w, 5), gen(n * w, 7));
            let got = attention(&q, &k, &v, n, n_head, 0.5);
            assert_naive(&got, &q, &k, &v, n, n_head, 0.5);
        }
    }

    #[test]
    fn fewer_queries_than_keys_match_a_naive_loop() {
        for (n_query, n, n_head, d) in [(5, 37, 2, 8), (40, 70, 2, 80)] {
            let w = n_head * d;
            let (q, k, v) = (gen(n_query * w, 3), gen(n * w, 5), gen(n * w, 7));
            let got = cross_attention(&q, &k, &v, n, n_head, 0.25);
            assert_eq!(got.len(), n_query * w);
            assert_naive(&got, &q, &k, &v, n, n_head, 0.25);
        }
    }

    fn gen(len: usize, s: usize) -> Vec<f32> {
        (0..len)
            .map(|i| (((i * s) % 17) as f32 - 8.0) * 0.1)
            .collect()
    }

    /// `got` is softmax(q·kᵀ·scale)·v per head, computed here in f64, to 1e-5.
    fn assert_naive(
        got: &[f32],
        q: &[f32],
        k: &[f32],
        v: &[f32],
        n: usize,
        n_head: usize,
        scale: f64,
    ) {
        let w = k.len() / n;
        let d = w / n_head;
        for h in 0..n_head {
            for i in 0..q.len() / w {
                let s: Vec<f64> = (0..n)
                    .map(|j| {
                        (0..d)
                            .map(|c| q[i * w + h * d + c] as f64 * k[j * w + h * d + c] as f64)
                            .sum::<f64>()
                            * scale
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                for c in 0..d {
                    let want: f64 = (0..n)
                        .map(|j| (s[j] - m).exp() / z * v[j * w + h * d + c] as f64)
                        .sum();
                    let g = got[i * w + h * d + c] as f64;
                    assert!((g - want).abs() < 1e-5, "h{h} i{i} c{c}: {g} vs {want}");
                }
            }
        }
    }

    #[test]
    fn every_value_tile_width_gives_the_same_bits() {
        let (n, n_pad, d, width, col) = (37, 48, 80, 100, 7);
        let p: Vec<f32> = gen(QUERY_TILE * n_pad, 3);
        let v: Vec<f32> = gen(n * width, 5);
        let start: Vec<f32> = gen(QUERY_TILE * d, 7);
        let run = |wide: usize| {
            let mut dst = start.clone();
            weighted_sum_tile(wide, &p, n_pad, n, &v, width, col, &mut dst);
            dst.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        };
        assert_eq!(run(32), run(16));
        assert_eq!(run(64), run(16));
    }

    #[test]
    fn every_variant_gives_the_same_bits() {
        for (n, n_head, d) in [(45, 2, 24), (70, 1, 80), (3, 3, 64)] {
            let w = n_head * d;
            let gen = |s: usize, len: usize| -> Vec<f32> {
                (0..len)
                    .map(|i| (((i * s) % 31) as f32 - 15.0) * 0.07)
                    .collect()
            };
            let (q, k, v) = (gen(3, n * w), gen(5, n * w), gen(7, n * w));
            let run = |isa| {
                let mut out = Vec::new();
                let mut bufs = AttentionBuffers::default();
                attention_with(isa, &q, &k, &v, n, n_head, 0.3, &mut bufs, &mut out);
                out
            };
            let base = run(Isa::Scalar);
            for isa in crate::cpu::available() {
                let got = run(isa);
                assert!(
                    got.iter()
                        .zip(&base)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "attention {isa:?} n {n} d {d}"
                );
            }
        }
    }

    /// Buffers kept from a larger call give a smaller one the bits of fresh buffers (the
    /// padding keys are zeroed again, the output is resized).
    #[test]
    fn reused_buffers_give_fresh_buffers_bits() {
        let gen = |s: usize, len: usize| -> Vec<f32> {
            (0..len)
                .map(|i| (((i * s) % 29) as f32 - 14.0) * 0.09)
                .collect()
        };
        let mut bufs = AttentionBuffers::default();
        let mut out = Vec::new();
        for n in [70, 45, 3, 45] {
            let (n_head, w) = (2, 2 * 24);
            let (q, k, v) = (gen(3, n * w), gen(5, n * w), gen(7, n * w));
            attention_into(&q, &k, &v, n, n_head, 0.3, &mut bufs, &mut out);
            let fresh = attention(&q, &k, &v, n, n_head, 0.3);
            assert_eq!(out.len(), fresh.len());
            assert!(
                out.iter()
                    .zip(&fresh)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "n {n}"
            );
        }
    }
}
