//! The vision tower's numeric pieces, computed as ggml's CPU backend computes them: LayerNorm
//! (sums in f64), the GELU variants through ggml's f16 lookup tables, and softmax attention
//! over all of an image's positions (no mask, no rotary embedding), threaded on the pool.

use std::sync::OnceLock;

use half::f16;

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
pub fn attention(q: &[f32], k: &[f32], v: &[f32], n: usize, n_head: usize, scale: f32) -> Vec<f32> {
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
        let mut scores = vec![0f32; n];
        for (qi, dst) in (blk * QUERY_BLOCK..n).zip(out.chunks_exact_mut(d)) {
            let qr = &q[qi * width + col..][..d];
            let mut max = f32::NEG_INFINITY;
            for (j, s) in scores.iter_mut().enumerate() {
                let kr = &k[j * width + col..][..d];
                *s = dot(qr, kr) * scale;
                max = max.max(*s);
            }
            let mut sum = 0f64;
            for s in scores.iter_mut() {
                *s = (*s - max).exp();
                sum += *s as f64;
            }
            let inv = (1.0 / sum) as f32;
            dst.fill(0.0);
            for (j, s) in scores.iter().enumerate() {
                let p = s * inv;
                let vr = &v[j * width + col..][..d];
                for (o, x) in dst.iter_mut().zip(vr) {
                    *o += p * x;
                }
            }
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

fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight partial sums: the compiler keeps them in one vector register.
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for i in 0..8 {
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
}
