//! The vision tower's numeric pieces, computed as ggml's CPU backend computes them: LayerNorm
//! (sums in f64), the GELU variants through ggml's f16 lookup tables, softmax attention over
//! all of an image's positions (no mask, no rotary embedding) and f32 × f32 products, threaded
//! on the pool.

use std::sync::OnceLock;

use half::f16;

use crate::cpu::Isa;
use crate::ops::expf::expf_ggml;
use crate::pool;

/// LayerNorm of each `dim`-long row of `x` in place: `(x - mean) / sqrt(var + eps) * w + b`.
pub fn layer_norm_rows(x: &mut [f32], dim: usize, w: &[f32], b: &[f32], eps: f32) {
    for row in x.chunks_exact_mut(dim) {
        let sum: f64 = row.iter().map(|&v| v as f64).sum();
        let mean = (sum / dim as f64) as f32;
        let mut sum2 = 0f64;
        for v in row.iter_mut() {
            *v -= mean;
            sum2 += (*v * *v) as f64;
        }
        let var = (sum2 / dim as f64) as f32;
        let scale = 1.0 / (var + eps).sqrt();
        for ((v, w), b) in row.iter_mut().zip(w).zip(b) {
            *v = *v * scale * *w + *b;
        }
    }
}

/// GELU, tanh form, as ggml applies it to f32: through the f16 table inside ±10.
pub fn gelu_in_place(x: &mut [f32]) {
    let t = table(&GELU, gelu_f32);
    for v in x {
        *v = if *v <= -10.0 {
            0.0
        } else if *v >= 10.0 {
            *v
        } else {
            t[f16::from_f32(*v).to_bits() as usize]
        };
    }
}

/// Quick GELU, `x·σ(1.702x)`, as ggml applies it to f32: through the f16 table everywhere.
pub fn gelu_quick_in_place(x: &mut [f32]) {
    let t = table(&GELU_QUICK, |x| x / (1.0 + (-1.702 * x).exp()));
    for v in x {
        *v = t[f16::from_f32(*v).to_bits() as usize];
    }
}

/// SiLU, `x·σ(x)`.
pub fn silu_in_place(x: &mut [f32]) {
    for v in x {
        *v /= 1.0 + (-*v).exp();
    }
}

fn gelu_f32(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + 0.044715 * x * x)).tanh())
}

static GELU: OnceLock<Vec<f32>> = OnceLock::new();
static GELU_QUICK: OnceLock<Vec<f32>> = OnceLock::new();

/// `f` at every f16 value, rounded to f16: ggml's tables.
fn table(cell: &'static OnceLock<Vec<f32>>, f: fn(f32) -> f32) -> &'static [f32] {
    cell.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| f16::from_f32(f(f16::from_bits(bits).to_f32())).to_f32())
            .collect()
    })
}

/// Queries handled by one task of [`attention`].
const QUERY_BLOCK: usize = 32;

/// Multi-head self-attention over `n` positions: `q`, `k`, `v` are `n × (n_head · d)`, head `h`
/// in columns `h·d..(h+1)·d`; the result has the same layout. Every position sees every other.
///
/// Each task takes one head and a block of queries. A query's scores are summed over the head's
/// columns in order, all keys at once (the head's keys transposed, so the loop runs along the
/// keys); the softmax takes ggml's vectorised `expf` and sums in f64, as ggml's soft_max does;
/// the output adds each value row in key order. Every step is the same operation per lane
/// whatever the vector width, so every CPU variant gives the same bits; the variant only sets
/// the width the loops are compiled for.
pub fn attention(q: &[f32], k: &[f32], v: &[f32], n: usize, n_head: usize, scale: f32) -> Vec<f32> {
    attention_with(crate::cpu::isa(), q, k, v, n, n_head, scale)
}

/// [`attention`] with the kernels of `isa` (which this CPU must support).
fn attention_with(
    isa: Isa,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    n: usize,
    n_head: usize,
    scale: f32,
) -> Vec<f32> {
    let width = q.len() / n;
    let d = width / n_head;
    let blocks = n.div_ceil(QUERY_BLOCK);
    // Head-major scratch, each head padded to whole query blocks, so that one task owns one
    // contiguous chunk: (head, block) = divmod(task, blocks).
    let padded = blocks * QUERY_BLOCK;
    let mut by_head = vec![0f32; n_head * padded * d];
    pool::global().for_each_chunk(&mut by_head, QUERY_BLOCK * d, |task, out| {
        let (h, blk) = (task / blocks, task % blocks);
        let col = h * d;
        // The head's keys transposed (`d × n`) and its values (`n × d`).
        let mut kt = vec![0f32; d * n];
        let mut vh = vec![0f32; n * d];
        for j in 0..n {
            let kr = &k[j * width + col..][..d];
            for (c, &x) in kr.iter().enumerate() {
                kt[c * n + j] = x;
            }
            vh[j * d..][..d].copy_from_slice(&v[j * width + col..][..d]);
        }
        let mut scores = vec![0f32; n];
        for (qi, dst) in (blk * QUERY_BLOCK..n).zip(out.chunks_exact_mut(d)) {
            let qr = &q[qi * width + col..][..d];
            with_isa(isa, || scores_row(qr, &kt, scale, &mut scores));
            let max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
            let sum = exp_sub(isa, &mut scores, max);
            let inv = (1.0 / sum) as f32;
            dst.fill(0.0);
            with_isa(isa, || weighted_sum(&scores, inv, &vh, dst));
        }
    });
    let mut out = vec![0f32; n * width];
    for h in 0..n_head {
        for i in 0..n {
            out[i * width + h * d..][..d].copy_from_slice(&by_head[(h * padded + i) * d..][..d]);
        }
    }
    out
}

/// `scores[j] = (q · kᵀ[·][j]) · scale`, the sum over `q`'s columns in order.
#[inline(always)]
fn scores_row(q: &[f32], kt: &[f32], scale: f32, scores: &mut [f32]) {
    let n = scores.len();
    scores.fill(0.0);
    for (c, &qc) in q.iter().enumerate() {
        for (s, &kv) in scores.iter_mut().zip(&kt[c * n..][..n]) {
            *s += qc * kv;
        }
    }
    for s in scores.iter_mut() {
        *s *= scale;
    }
}

/// `dst += Σ_j (p[j] · inv) · v[j]`, keys in order.
#[inline(always)]
fn weighted_sum(p: &[f32], inv: f32, v: &[f32], dst: &mut [f32]) {
    let d = dst.len();
    for (j, &pj) in p.iter().enumerate() {
        let w = pj * inv;
        for (o, &x) in dst.iter_mut().zip(&v[j * d..][..d]) {
            *o += w * x;
        }
    }
}

/// `x[i] = expf(x[i] - max)` with ggml's `expf`; the sum of the results in f64, in order.
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
    x.iter().map(|&v| v as f64).sum()
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

/// Runs `f` compiled for the vector width of `isa`: its loops are lane-independent, so the
/// bits are the same on every variant.
#[inline(always)]
fn with_isa<R>(isa: Isa, f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        unsafe fn wide16<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        #[target_feature(enable = "avx2")]
        unsafe fn wide8<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        match isa {
            // SAFETY: `isa` is the CPU's (cpu::isa), so it supports the features.
            Isa::Avx512 => return unsafe { wide16(f) },
            // SAFETY: as above.
            Isa::Avx2 => return unsafe { wide8(f) },
            _ => {}
        }
    }
    let _ = isa;
    f()
}

/// Rows of [`matmul_f32`]'s output per task.
const F32_ROWS: usize = 4;

/// `out = x · Wᵀ` for `n` rows of `x` (`n × k`) and f32 weights `w` (`rows × k`), threaded on
/// the pool: ggml multiplies f32 by f32 in f32 (our kernels' F32 path is the generic
/// f64-accumulated dot, too slow for a patch embedding). Each dot keeps 32 partial sums,
/// added in a fixed order, so every variant gives the same bits.
pub fn matmul_f32(w: &[f32], rows: usize, x: &[f32], n: usize, out: &mut [f32]) {
    matmul_f32_with(crate::cpu::isa(), w, rows, x, n, out)
}

/// [`matmul_f32`] with the kernels of `isa` (which this CPU must support).
fn matmul_f32_with(isa: Isa, w: &[f32], rows: usize, x: &[f32], n: usize, out: &mut [f32]) {
    let k = w.len() / rows;
    assert_eq!(x.len(), n * k, "matmul_f32: activation shape");
    assert_eq!(out.len(), n * rows, "matmul_f32: output shape");
    pool::global().for_each_chunk(out, F32_ROWS * rows, |task, dst| {
        with_isa(isa, || {
            for (r, o) in dst.chunks_exact_mut(rows).enumerate() {
                let xr = &x[(task * F32_ROWS + r) * k..][..k];
                for (v, wr) in o.iter_mut().zip(w.chunks_exact(k)) {
                    *v = dot(xr, wr);
                }
            }
        })
    });
}

#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    const L: usize = 32;
    let mut acc = [0f32; L];
    let (ac, bc) = (a.chunks_exact(L), b.chunks_exact(L));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for i in 0..L {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ar.iter().zip(br) {
        s += x * y;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_norm_centres_and_scales() {
        let mut x = vec![1.0, 2.0, 3.0, 4.0];
        layer_norm_rows(&mut x, 4, &[1.0; 4], &[0.5; 4], 0.0);
        let mean: f32 = x.iter().sum::<f32>() / 4.0;
        assert!((mean - 0.5).abs() < 1e-6);
        let var: f32 = x.iter().map(|v| (v - 0.5) * (v - 0.5)).sum::<f32>() / 4.0;
        assert!((var - 1.0).abs() < 1e-5);
    }

    #[test]
    fn gelus_match_their_formulas_to_f16_precision() {
        let mut a: Vec<f32> = (-40..40).map(|i| i as f32 * 0.3).collect();
        let mut b = a.clone();
        let xs = a.clone();
        gelu_in_place(&mut a);
        gelu_quick_in_place(&mut b);
        for ((x, g), q) in xs.iter().zip(&a).zip(&b) {
            let erf_like = gelu_f32(*x);
            assert!(
                (g - erf_like).abs() <= 2e-3 * erf_like.abs().max(1.0),
                "gelu({x})"
            );
            let quick = x / (1.0 + (-1.702 * x).exp());
            assert!(
                (q - quick).abs() <= 2e-2 * quick.abs().max(0.1),
                "gelu_quick({x})"
            );
        }
        assert_eq!(a.last(), xs.last(), "x ≥ 10 passes through");
    }

    #[test]
    fn attention_matches_a_naive_loop() {
        let (n, n_head, d) = (37, 3, 4);
        let w = n_head * d;
        let gen = |s: usize| -> Vec<f32> {
            (0..n * w)
                .map(|i| (((i * s) % 17) as f32 - 8.0) * 0.1)
                .collect()
        };
        let (q, k, v) = (gen(3), gen(5), gen(7));
        let got = attention(&q, &k, &v, n, n_head, 0.5);
        for h in 0..n_head {
            for i in 0..n {
                let s: Vec<f64> = (0..n)
                    .map(|j| {
                        (0..d)
                            .map(|c| q[i * w + h * d + c] as f64 * k[j * w + h * d + c] as f64)
                            .sum::<f64>()
                            * 0.5
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
    fn every_variant_gives_the_same_bits() {
        let (n, n_head, d) = (45, 2, 24);
        let w = n_head * d;
        let gen = |s: usize, len: usize| -> Vec<f32> {
            (0..len)
                .map(|i| (((i * s) % 31) as f32 - 15.0) * 0.07)
                .collect()
        };
        let (q, k, v) = (gen(3, n * w), gen(5, n * w), gen(7, n * w));
        let wt = gen(11, 7 * w);
        let base = attention_with(Isa::Scalar, &q, &k, &v, n, n_head, 0.3);
        let mut base_mm = vec![0f32; n * 7];
        matmul_f32_with(Isa::Scalar, &wt, 7, &q, n, &mut base_mm);
        for isa in crate::cpu::available() {
            let got = attention_with(isa, &q, &k, &v, n, n_head, 0.3);
            assert!(
                got.iter()
                    .zip(&base)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "attention {isa:?}"
            );
            let mut mm = vec![0f32; n * 7];
            matmul_f32_with(isa, &wt, 7, &q, n, &mut mm);
            assert!(
                mm.iter()
                    .zip(&base_mm)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "matmul_f32 {isa:?}"
            );
        }
    }

    #[test]
    fn matmul_f32_matches_f64_sums() {
        let (rows, k, n) = (5, 70, 9);
        let w: Vec<f32> = (0..rows * k)
            .map(|i| ((i * 7) % 13) as f32 * 0.1 - 0.6)
            .collect();
        let x: Vec<f32> = (0..n * k)
            .map(|i| ((i * 5) % 11) as f32 * 0.1 - 0.5)
            .collect();
        let mut out = vec![0f32; n * rows];
        matmul_f32(&w, rows, &x, n, &mut out);
        for r in 0..n {
            for o in 0..rows {
                let want: f64 = (0..k)
                    .map(|c| x[r * k + c] as f64 * w[o * k + c] as f64)
                    .sum();
                assert!((out[r * rows + o] as f64 - want).abs() < 1e-4);
            }
        }
    }
}
