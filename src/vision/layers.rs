//! The vision tower's numeric pieces, computed as ggml's CPU backend computes them: LayerNorm
//! (sums in f64), the GELU variants through ggml's f16 lookup tables and f32 × f32 products,
//! threaded on the pool; [`with_isa`] runs a loop body compiled for the CPU's vector width.
//! Attention is in `attention.rs`.

use std::sync::OnceLock;

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::cpu::Isa;
use crate::pool;

/// LayerNorm of each `dim`-long row of `x` in place: `(x - mean) / sqrt(var + eps) * w + b`,
/// rows shared out on the pool.
pub fn layer_norm_rows(x: &mut [f32], dim: usize, w: &[f32], b: &[f32], eps: f32) {
    let rows_per_task = (PAR_CHUNK / dim.max(1)).max(1);
    par_chunks(x, rows_per_task * dim, |x| {
        for row in x.chunks_exact_mut(dim) {
            layer_norm(row, w, b, eps);
        }
    });
}

fn layer_norm(row: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let dim = row.len();
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

/// `b` added to each `b.len()`-long row of `x` (a bias), rows shared out on the pool.
pub fn add_rows(x: &mut [f32], b: &[f32]) {
    let rows_per_task = (PAR_CHUNK / b.len().max(1)).max(1);
    par_chunks(x, rows_per_task * b.len(), |x| {
        for row in x.chunks_exact_mut(b.len()) {
            for (v, bv) in row.iter_mut().zip(b) {
                *v += bv;
            }
        }
    });
}

/// Elements per task of the element-wise passes (LayerNorm, the activations): small enough
/// to share a tower's rows out, large enough that a task outweighs its hand-off.
const PAR_CHUNK: usize = 16 * 1024;

/// `f` on chunks of about `chunk` elements of `x`, in parallel on the pool when there is more
/// than one.
fn par_chunks(x: &mut [f32], chunk: usize, f: impl Fn(&mut [f32]) + Sync) {
    if x.len() <= chunk {
        f(x)
    } else {
        pool::global().for_each_chunk(x, chunk, |_, c| f(c));
    }
}

/// GELU, tanh form, as ggml applies it to f32: through the f16 table inside ±10.
pub fn gelu_in_place(x: &mut [f32]) {
    let t = table(&GELU, gelu_f32);
    par_chunks(x, PAR_CHUNK, |x| {
        through_table(x, |v, h| {
            if v <= -10.0 {
                0.0
            } else if v >= 10.0 {
                v
            } else {
                t[h.to_bits() as usize]
            }
        })
    });
}

/// Quick GELU, `x·σ(1.702x)`, as ggml applies it to f32: through the f16 table everywhere.
pub fn gelu_quick_in_place(x: &mut [f32]) {
    let t = table(&GELU_QUICK, |x| x / (1.0 + (-1.702 * x).exp()));
    par_chunks(x, PAR_CHUNK, |x| {
        through_table(x, |_, h| t[h.to_bits() as usize])
    });
}

/// Each `v` of `x` replaced by `f(v, v rounded to half)`: the rounding through the `half`
/// crate's slice conversion (F16C eight at a time where the CPU has it; the same
/// round-to-nearest-even as one by one, at a fraction of the cost).
#[inline(always)]
fn through_table(x: &mut [f32], f: impl Fn(f32, f16) -> f32) {
    const CHUNK: usize = 256;
    let mut h = [f16::ZERO; CHUNK];
    for c in x.chunks_mut(CHUNK) {
        let h = &mut h[..c.len()];
        h.convert_from_f32_slice(c);
        for (v, &hv) in c.iter_mut().zip(h.iter()) {
            *v = f(*v, hv);
        }
    }
}

/// SiLU, `x·σ(x)`.
pub fn silu_in_place(x: &mut [f32]) {
    par_chunks(x, PAR_CHUNK, |x| {
        for v in x {
            *v /= 1.0 + (-*v).exp();
        }
    });
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

/// A loop body whose steps are the same operation per lane whatever the vector width, run by
/// [`with_isa`]. A trait rather than a closure: `call` is `#[inline(always)]`, so it is
/// compiled inside the variant's `#[target_feature]` function (a closure may be left out of
/// line, in the baseline's SSE).
pub(super) trait IsaBody {
    fn call(self, isa: Isa);
}

/// Runs `body` compiled for the vector width of `isa` (which this CPU must support); the bits
/// are the same on every variant.
pub(super) fn with_isa(isa: Isa, body: impl IsaBody) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        unsafe fn wide16(body: impl IsaBody) {
            body.call(Isa::Avx512)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn wide8(body: impl IsaBody) {
            body.call(Isa::Avx2)
        }
        match isa {
            // SAFETY: `isa` is the CPU's (cpu::isa), so it supports the features.
            Isa::Avx512 => return unsafe { wide16(body) },
            // SAFETY: as above.
            Isa::Avx2 => return unsafe { wide8(body) },
            _ => {}
        }
    }
    body.call(isa)
}

/// Rows of [`matmul_f32`]'s output per task.
const F32_ROWS: usize = 16;

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
        let x = &x[task * F32_ROWS * k..][..dst.len() / rows * k];
        with_isa(isa, F32Rows { w, k, x, dst });
    });
}

/// Rows of `x` times every row of `w` into `dst` ([`matmul_f32`]'s task).
struct F32Rows<'a> {
    w: &'a [f32],
    k: usize,
    x: &'a [f32],
    dst: &'a mut [f32],
}

impl IsaBody for F32Rows<'_> {
    #[inline(always)]
    fn call(self, _: Isa) {
        let k = self.k;
        let rows = self.w.len() / k;
        // Weight rows in blocks that stay in L2 while the task's tokens meet them four at a
        // time, so the weights stream past once per task rather than once per token.
        let block = (F32_BLOCK_BYTES / (4 * k)).max(1);
        for r0 in (0..rows).step_by(block) {
            let w = &self.w[r0 * k..(r0 + block).min(rows) * k];
            for (t0, xs) in self.x.chunks(4 * k).enumerate() {
                let o = &mut self.dst[4 * t0 * rows + r0..];
                dots(xs, w, k, rows, o);
            }
        }
    }
}

/// Bytes of f32 weight rows [`matmul_f32`] keeps in L2 at a time.
const F32_BLOCK_BYTES: usize = 128 * 1024;

/// `out[t * stride + r]` = `dot(token t of xs, weight row r of w)` (rows of `k`): each weight
/// row meets the group's tokens one after another while it is in L1.
#[inline(always)]
fn dots(xs: &[f32], w: &[f32], k: usize, stride: usize, out: &mut [f32]) {
    for (r, wr) in w.chunks_exact(k).enumerate() {
        for (t, xr) in xs.chunks_exact(k).enumerate() {
            out[t * stride + r] = dot(xr, wr);
        }
    }
}

/// One dot in 32 partial sums, added in order, then the tail element by element.
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

    /// The activations round through the slice converter; it must round as one by one does.
    #[test]
    fn slice_rounding_equals_element_rounding() {
        let xs: Vec<f32> = (0..200_000u32)
            .map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761) >> 2) * 1e-30)
            .chain((-2000..2000).map(|i| i as f32 * 0.0049))
            .chain([65504.0, 65520.0, -65520.0, 1e-8, -6.1e-5, f32::INFINITY])
            .collect();
        let mut got = xs.clone();
        through_table(&mut got, |_, h| f32::from_bits(h.to_bits() as u32));
        for (x, g) in xs.iter().zip(&got) {
            assert_eq!(g.to_bits(), f16::from_f32(*x).to_bits() as u32, "{x}");
        }
    }

    #[test]
    fn every_variant_gives_the_same_bits() {
        let (n, w) = (45, 48);
        let gen = |s: usize, len: usize| -> Vec<f32> {
            (0..len)
                .map(|i| (((i * s) % 31) as f32 - 15.0) * 0.07)
                .collect()
        };
        let (x, wt) = (gen(3, n * w), gen(11, 7 * w));
        let mut base = vec![0f32; n * 7];
        matmul_f32_with(Isa::Scalar, &wt, 7, &x, n, &mut base);
        for isa in crate::cpu::available() {
            let mut mm = vec![0f32; n * 7];
            matmul_f32_with(isa, &wt, 7, &x, n, &mut mm);
            assert!(
                mm.iter()
                    .zip(&base)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "matmul_f32 {isa:?}"
            );
        }
    }

    /// `matmul_f32` of seeded `rows × k` weights and `n` tokens: (weights, tokens, product).
    fn f32_product(rows: usize, k: usize, n: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let w: Vec<f32> = (0..rows * k)
            .map(|i| ((i * 7) % 13) as f32 * 0.1 - 0.6)
            .collect();
        let x: Vec<f32> = (0..n * k)
            .map(|i| ((i * 5) % 11) as f32 * 0.1 - 0.5)
            .collect();
        let mut out = vec![0f32; n * rows];
        matmul_f32(&w, rows, &x, n, &mut out);
        (w, x, out)
    }

    /// Weight blocks, token groups and task splits change no dot's order: each is 32 partial
    /// sums, summed in order, then the tail.
    #[test]
    fn matmul_f32_keeps_each_dots_order() {
        let (rows, k, n) = (40, 1030, 21);
        let (w, x, out) = f32_product(rows, k, n);
        for t in 0..n {
            for r in 0..rows {
                let (a, b) = (&x[t * k..][..k], &w[r * k..][..k]);
                let mut acc = [0f32; 32];
                for c in 0..k / 32 {
                    for i in 0..32 {
                        acc[i] += a[32 * c + i] * b[32 * c + i];
                    }
                }
                let mut want: f32 = acc.iter().sum();
                for c in k / 32 * 32..k {
                    want += a[c] * b[c];
                }
                assert_eq!(out[t * rows + r].to_bits(), want.to_bits(), "t{t} r{r}");
            }
        }
    }

    #[test]
    fn matmul_f32_matches_f64_sums() {
        let (rows, k, n) = (5, 70, 9);
        let (w, x, out) = f32_product(rows, k, n);
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
