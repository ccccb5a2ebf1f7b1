//! One query token over a long run of cached f16 positions (generation deep into a context):
//! the positions are cut into fixed chunks of [`CHUNK`], every (KV head, chunk) is one task on
//! the pool, and the chunks' partial results are merged per head, as ggml's CPU backend splits
//! a single query over the KV length across its threads once the cache holds 512 cells.
//!
//! ggml's split makes its results depend on the thread count; here the chunks are fixed, so the
//! result depends on neither the thread count nor the CPU variant. Inside a chunk everything is
//! f32 (the value accumulator is not rounded to f16 after every step, as ggml's one-chunk kernel
//! does for f16 values) and the softmax moves by blocks of [`BLOCK`] positions: the block's
//! maximum rescales the accumulator once, and the block's weights come from one vectorised
//! `expf` ([`crate::ops::expf`], whose scalar twin gives the portable path the same bits). That
//! takes the f16 round trip and the per-position softmax step out of the inner loop, which is
//! what made the one-token kernel cost more than llama.cpp's split at long depths.

use super::{AttnShape, Rows, Scores};
use crate::ops::expf::expf_ggml;
use crate::pool;
use half::f16;

/// Positions from which one token's attention over f16 rows takes this path: beyond 256,
/// where llama.cpp (its cache view padded to 256 cells, split from 512) splits too.
pub const MIN_POSITIONS: usize = 257;

/// Positions per task.
const CHUNK: usize = 256;

/// Positions taken together: their dots, then one softmax rescale, then their values.
const BLOCK: usize = 16;

/// Accumulator vectors one pass over a block keeps in registers (the x86 kernels).
#[cfg(target_arch = "x86_64")]
const PASS: usize = 8;

/// A partial result per head: the accumulator (`hd` floats), the running maximum and the sum.
fn partial_len(hd: usize) -> usize {
    hd + 2
}

/// Attention of one token's query heads `q` (`n_head * head_dim` values) over positions
/// `first..=last` of the sequence's f16 `keys` and `values` (rows of `n_head_kv * head_dim`),
/// into `out` (like `q`).
pub fn attend(
    shape: &AttnShape,
    q: &[f32],
    keys: &[f16],
    values: &[f16],
    first: usize,
    last: usize,
    out: &mut [f32],
) {
    let hd = shape.head_dim;
    let (n_kv, group) = (shape.n_head_kv, shape.n_head / shape.n_head_kv);
    assert!(
        q.len() == shape.n_head * hd && out.len() == q.len() && first <= last,
        "attention: {} query values for {} heads of {hd}",
        q.len(),
        shape.n_head
    );
    let n_chunks = (last + 1 - first).div_ceil(CHUNK);
    let per_task = group * partial_len(hd);
    let mut partials = vec![0f32; n_kv * n_chunks * per_task];
    let kv_dim = n_kv * hd;
    let scores = shape.scores();
    let isa = crate::cpu::isa();
    pool::global().for_each_chunk(&mut partials, per_task, |task, part| {
        let (kv_head, c) = (task / n_chunks, task % n_chunks);
        let c0 = first + c * CHUNK;
        let row = |data: &'_ [f16], p: usize| -> std::ops::Range<usize> {
            let start = p * kv_dim + kv_head * hd;
            assert!(
                start + hd <= data.len(),
                "attention: position {p} beyond the cache"
            );
            start..start + hd
        };
        let rows = Rows {
            keys,
            values,
            first: c0,
            last: (c0 + CHUNK - 1).min(last),
            row: &row,
        };
        let qh = &q[kv_head * group * hd..][..group * hd];
        chunk(isa, scores, qh, hd, &rows, part);
    });
    for (h, out) in out.chunks_exact_mut(hd).enumerate() {
        let (kv_head, g) = (h / group, h % group);
        let parts = (0..n_chunks).map(|c| {
            let task = &partials[(kv_head * n_chunks + c) * per_task..][..per_task];
            &task[g * partial_len(hd)..][..partial_len(hd)]
        });
        merge(parts, out);
    }
}

/// Merges the chunks' partial results of one head, in chunk order, into its output.
fn merge<'a>(parts: impl Iterator<Item = &'a [f32]> + Clone, out: &mut [f32]) {
    let hd = out.len();
    let max = parts
        .clone()
        .map(|p| p[hd])
        .fold(f32::NEG_INFINITY, f32::max);
    out.fill(0.0);
    let mut sum = 0f32;
    for p in parts {
        let w = expf_ggml(p[hd] - max);
        for (o, a) in out.iter_mut().zip(&p[..hd]) {
            *o += a * w;
        }
        sum += p[hd + 1] * w;
    }
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    out.iter_mut().for_each(|o| *o *= inv);
}

/// One chunk's partial results for the heads in `q` with the kernels of `isa`.
pub(super) fn chunk(
    isa: crate::cpu::Isa,
    scores: Scores,
    q: &[f32],
    hd: usize,
    rows: &Rows,
    part: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if hd.is_multiple_of(super::DOT_STEP) {
        use crate::cpu::Isa;
        match isa {
            // SAFETY: the CPU supports `isa` (AVX-512F/DQ, F16C, FMA); `hd` is checked above.
            Isa::Avx512 => return unsafe { super::x86_avx512::chunk(scores, q, hd, rows, part) },
            // SAFETY: as above (AVX2, F16C, FMA).
            Isa::Avx2 => return unsafe { super::x86_avx2::chunk(scores, q, hd, rows, part) },
            _ => {}
        }
    }
    let _ = isa;
    portable(scores, q, hd, rows, part);
}

/// The kernel over SIMD vectors ([`Lanes`]), with the portable path's bits.
#[cfg(target_arch = "x86_64")]
pub(super) mod simd {
    use super::{add_weights, block_max, rescale, write_partials, BLOCK, PASS};
    use crate::ops::attention::one_token::{flat, rounded_query, widen_block, BlockLines, Lanes};
    use crate::ops::attention::{Rows, Scores};

    /// The chunk kernel over `L`'s vectors.
    ///
    /// # Safety
    /// The CPU must support `L`'s features; `hd` is a multiple of 64 and divides `q.len()`;
    /// `part` holds `partial_len(hd)` floats per head.
    #[inline(always)]
    pub(in crate::ops::attention) unsafe fn kernel<L: Lanes>(
        scores: Scores,
        q: &[f32],
        hd: usize,
        rows: &Rows,
        part: &mut [f32],
    ) {
        let (n, w) = (q.len() / hd, L::N);
        let qr = rounded_query::<L>(q);
        let qr = flat(&qr);
        let mut buffers = BlockLines::new(BLOCK, hd, q.len());
        let (kb, vb, acc) = buffers.split();
        let (mut max, mut sum) = (vec![f32::NEG_INFINITY; n], vec![0f32; n]);
        // Per head: the block's scores, then their weights; the accumulator's factor.
        let mut weight = vec![0f32; n * BLOCK];
        let mut factor = vec![1f32; n];
        let mut p0 = rows.first;
        while p0 <= rows.last {
            let len = (rows.last + 1 - p0).min(BLOCK);
            widen_block::<L>(rows, p0, len, hd, kb, vb);
            for (h, qh) in qr.chunks_exact(hd).enumerate() {
                let wh = &mut weight[h * BLOCK..][..BLOCK];
                for (i, k) in kb.chunks_exact(hd).take(len).enumerate() {
                    wh[i] = scores.apply(L::dot(qh, k));
                }
                let new_max = block_max(max[h], &wh[..len]);
                factor[h] = rescale(max[h], new_max);
                max[h] = new_max;
                // Lanes past the block's end are computed and ignored.
                wh[len..].fill(new_max);
                let m = L::splat(new_max);
                for c in wh.chunks_exact_mut(w) {
                    L::store(c, L::exp(L::sub(L::load(c), m)));
                }
                sum[h] = add_weights(sum[h] * factor[h], &wh[..len]);
            }
            for (first, chunk) in acc.chunks_mut(PASS * w).enumerate() {
                let first = first * PASS * w;
                let values = &vb[..len * hd];
                if chunk.len() == PASS * w {
                    pass::<L, PASS>(chunk, first, hd, values, &weight, &factor, len);
                } else {
                    assert_eq!(chunk.len(), PASS / 2 * w, "attention: heads of {hd}");
                    pass::<L, { PASS / 2 }>(chunk, first, hd, values, &weight, &factor, len);
                }
            }
            p0 += len;
        }
        write_partials(acc, &max, &sum, hd, part);
    }

    /// One pass of the value accumulation over a block, `R` accumulator vectors from float
    /// `first` of the heads' concatenation: each scaled by its head's factor when the maximum
    /// moved, then every position's value added with its weight, in position order.
    #[inline(always)]
    unsafe fn pass<L: Lanes, const R: usize>(
        acc: &mut [f32],
        first: usize,
        hd: usize,
        values: &[f32],
        weight: &[f32],
        factor: &[f32],
        len: usize,
    ) {
        let w = L::N;
        let at: [(usize, usize); R] = std::array::from_fn(|r| {
            let x = first + r * w;
            (x / hd, x % hd)
        });
        let mut reg = [L::splat(0.0); R];
        for ((r, a), &(h, _)) in reg.iter_mut().zip(acc.chunks_exact(w)).zip(&at) {
            *r = L::load(a);
            if factor[h] != 1.0 {
                *r = L::mul(*r, L::splat(factor[h]));
            }
        }
        for i in 0..len {
            let row = &values[i * hd..][..hd];
            for r in 0..R {
                let (h, col) = at[r];
                reg[r] = L::fma(
                    L::load(&row[col..]),
                    L::splat(weight[h * BLOCK + i]),
                    reg[r],
                );
            }
        }
        for (r, a) in reg.iter().zip(acc.chunks_exact_mut(w)) {
            L::store(a, *r);
        }
    }
}

/// The running maximum after a block of scores.
#[inline(always)]
fn block_max(max: f32, scores: &[f32]) -> f32 {
    scores.iter().fold(max, |m, &s| m.max(s))
}

/// The accumulator's factor when the maximum moves from `old` to `new`: none before the first
/// block (the accumulator is still zero).
#[inline(always)]
fn rescale(old: f32, new: f32) -> f32 {
    if old == new {
        1.0
    } else if old == f32::NEG_INFINITY {
        0.0
    } else {
        expf_ggml(old - new)
    }
}

/// `sum` plus the weights, in order.
#[inline(always)]
fn add_weights(sum: f32, weights: &[f32]) -> f32 {
    weights.iter().fold(sum, |s, &w| s + w)
}

/// Each head's accumulator, maximum and sum into `part`.
fn write_partials(acc: &[f32], max: &[f32], sum: &[f32], hd: usize, part: &mut [f32]) {
    for (h, p) in part.chunks_exact_mut(partial_len(hd)).enumerate() {
        p[..hd].copy_from_slice(&acc[h * hd..][..hd]);
        p[hd] = max[h];
        p[hd + 1] = sum[h];
    }
}

/// The kernel's steps one float at a time (any CPU, any head size), with its bits.
fn portable(scores: Scores, q: &[f32], hd: usize, rows: &Rows, part: &mut [f32]) {
    let n = q.len() / hd;
    let q16: Vec<f32> = q.iter().map(|v| f16::from_f32(*v).to_f32()).collect();
    let mut acc = vec![0f32; q.len()];
    let (mut max, mut sum) = (vec![f32::NEG_INFINITY; n], vec![0f32; n]);
    let mut weight = [0f32; BLOCK];
    let mut p0 = rows.first;
    while p0 <= rows.last {
        let len = (rows.last + 1 - p0).min(BLOCK);
        for h in 0..n {
            let qh = &q16[h * hd..][..hd];
            for (i, wi) in weight.iter_mut().take(len).enumerate() {
                let k = &rows.keys[(rows.row)(rows.keys, p0 + i)];
                *wi = scores.apply(super::scalar::dot_f16(qh, k));
            }
            let new_max = block_max(max[h], &weight[..len]);
            let factor = rescale(max[h], new_max);
            max[h] = new_max;
            weight[..len]
                .iter_mut()
                .for_each(|x| *x = expf_ggml(*x - new_max));
            sum[h] = add_weights(sum[h] * factor, &weight[..len]);
            let ah = &mut acc[h * hd..][..hd];
            if factor != 1.0 {
                ah.iter_mut().for_each(|a| *a *= factor);
            }
            for (i, &wi) in weight.iter().take(len).enumerate() {
                let v = &rows.values[(rows.row)(rows.values, p0 + i)];
                for (a, x) in ah.iter_mut().zip(v) {
                    *a = x.to_f32().mul_add(wi, *a);
                }
            }
        }
        p0 += len;
    }
    write_partials(&acc, &max, &sum, hd, part);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rnd(seed: &mut u64) -> f32 {
        crate::ops::attention::tests::uniform(seed, 2.0)
    }

    #[test]
    fn simd_and_portable_chunks_agree_bit_for_bit() {
        let (hd, n, heads) = (128, 77, 3);
        let mut seed = 11u64;
        let q: Vec<f32> = (0..heads * hd).map(|_| rnd(&mut seed) * 3.0).collect();
        let keys: Vec<f16> = (0..n * hd).map(|_| f16::from_f32(rnd(&mut seed))).collect();
        let values: Vec<f16> = (0..n * hd).map(|_| f16::from_f32(rnd(&mut seed))).collect();
        let row = |_: &[f16], p: usize| p * hd..(p + 1) * hd;
        let rows = Rows {
            keys: &keys,
            values: &values,
            first: 5,
            last: n - 1,
            row: &row,
        };
        for softcap in [0.0, 3.0] {
            let scores = AttnShape {
                n_head: 1,
                n_head_kv: 1,
                head_dim: hd,
                scale: 0.125,
                softcap,
            }
            .scores();
            let mut expect = vec![0.0; heads * (hd + 2)];
            portable(scores, &q, hd, &rows, &mut expect);
            for isa in crate::cpu::available() {
                let mut got = vec![0.0; heads * (hd + 2)];
                chunk(isa, scores, &q, hd, &rows, &mut got);
                assert_eq!(expect, got, "{isa:?}, softcap {softcap}");
            }
        }
    }

    #[test]
    fn long_attention_is_exact_attention_within_rounding() {
        // Two KV heads of three query heads each, a window that starts mid-chunk.
        let (hd, n_kv, group, n) = (64, 2, 3, 700);
        let kv = n_kv * hd;
        let mut seed = 3u64;
        let q: Vec<f32> = (0..n_kv * group * hd).map(|_| rnd(&mut seed)).collect();
        let keys: Vec<f16> = (0..n * kv).map(|_| f16::from_f32(rnd(&mut seed))).collect();
        let values: Vec<f16> = (0..n * kv).map(|_| f16::from_f32(rnd(&mut seed))).collect();
        let shape = AttnShape {
            n_head: n_kv * group,
            n_head_kv: n_kv,
            head_dim: hd,
            scale: 0.3,
            softcap: 0.0,
        };
        let (first, last) = (40, n - 1);
        let mut out = vec![0.0; q.len()];
        attend(&shape, &q, &keys, &values, first, last, &mut out);
        for h in 0..n_kv * group {
            let kvh = h / group;
            // Exact attention (f64) of the head's query rounded to f16, as the kernel takes it.
            let qh: Vec<f64> = q[h * hd..][..hd]
                .iter()
                .map(|v| f16::from_f32(*v).to_f64())
                .collect();
            let at = |data: &[f16], p: usize, d: usize| data[p * kv + kvh * hd + d].to_f64();
            let s: Vec<f64> = (first..=last)
                .map(|p| (0..hd).map(|d| qh[d] * at(&keys, p, d)).sum::<f64>() * 0.3)
                .collect();
            let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
            let total: f64 = w.iter().sum();
            for d in 0..hd {
                let exact = (first..=last)
                    .zip(&w)
                    .map(|(p, w)| w * at(&values, p, d))
                    .sum::<f64>()
                    / total;
                let got = out[h * hd + d] as f64;
                assert!(
                    (got - exact).abs() < 1e-5,
                    "head {h} dim {d}: {got} vs {exact}"
                );
            }
        }
    }
}
