//! Scaled dot-product attention of query tokens over a sequence's cached keys and values
//! (stored as f16), causal, with an optional sliding window.
//!
//! Two paths, chosen as llama.cpp's CPU backend chooses them, because some models (SmolLM2 Q4_1)
//! are chaotic at the rounding level and matching llama.cpp token for token needs the same
//! rounding sequence, not just the same mathematics:
//! - batches under [`tiled::MIN_TOKENS`] tokens (generation, short prompts): one (token, head)
//!   at a time, here, following ggml's `flash_attn_ext_f16_one_chunk` (AVX-512 build): the
//!   query rounded to f16, q·k summed in four 16-lane FMA accumulators reduced in a fixed order,
//!   an online softmax with `expf`, and the value accumulator kept in f16 and rounded after
//!   every fused multiply-add;
//! - longer batches (prompt processing): [`tiled`], all in f32, in ggml's tiled order.

pub mod tiled;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;

use crate::cpu::Isa;
use crate::ops::mathf;
use half::f16;

/// The shape of one attention layer.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n_head: usize,
    pub n_head_kv: usize,
    pub head_dim: usize,
    /// Multiplies q·k before the softmax.
    pub scale: f32,
    /// Logit soft-capping of the scores, `cap · tanh(s / cap)` (Gemma 2); 0 for none.
    pub softcap: f32,
}

impl AttnShape {
    /// How a raw q·k becomes a score.
    pub fn scores(&self) -> Scores {
        if self.softcap != 0.0 {
            Scores {
                mul: self.scale / self.softcap,
                cap: self.softcap,
            }
        } else {
            Scores {
                mul: self.scale,
                cap: 0.0,
            }
        }
    }
}

/// A raw q·k to a score: scaled, then soft-capped when `cap` is non-zero, in ggml's order (the
/// scale divided by the cap once, `tanhf` of the product, times the cap).
#[derive(Clone, Copy, Debug)]
pub struct Scores {
    mul: f32,
    cap: f32,
}

impl Scores {
    #[inline(always)]
    pub fn apply(self, dot: f32) -> f32 {
        if self.cap != 0.0 {
            crate::ops::softcap::softcap(dot, self.mul, self.cap)
        } else {
            dot * self.mul
        }
    }
}

/// Elements one step of ggml's f16 dot product covers (4 accumulators × 16 lanes).
const DOT_STEP: usize = 64;

/// Attention output for one query head.
///
/// `q`: the head's query (`head_dim`); `keys`/`values`: the sequence's cache rows, each
/// `n_head_kv * head_dim` long, for positions `first..=last`; `kv_head` picks the shared head.
#[allow(clippy::too_many_arguments)]
pub fn attend_one_head(
    shape: &AttnShape,
    q: &[f32],
    keys: &[f16],
    values: &[f16],
    kv_head: usize,
    first: usize,
    last: usize,
    out: &mut [f32],
) {
    let hd = shape.head_dim;
    let kv_dim = shape.n_head_kv * hd;
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
        first,
        last,
        row: &row,
    };
    attend_rows(crate::cpu::isa(), shape.scores(), q, &rows, out);
}

/// One head over `rows` with the kernels of `isa` (which this CPU must support).
fn attend_rows(isa: Isa, scores: Scores, q: &[f32], rows: &Rows, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if q.len().is_multiple_of(DOT_STEP) {
        match isa {
            // SAFETY: the caller guarantees the CPU supports `isa` (AVX-512F, F16C, FMA).
            Isa::Avx512 => return unsafe { x86::attend(scores, q, rows, out) },
            // SAFETY: as above (AVX2, F16C, FMA).
            Isa::Avx2 => return unsafe { x86_avx2::attend(scores, q, rows, out) },
            _ => {}
        }
    }
    let _ = isa;
    scalar::attend(scores, q, rows, out);
}

/// The key and value rows one head attends over.
struct Rows<'a> {
    keys: &'a [f16],
    values: &'a [f16],
    first: usize,
    last: usize,
    row: &'a dyn Fn(&[f16], usize) -> std::ops::Range<usize>,
}

/// The online-softmax bookkeeping shared by both implementations: returns `(ms, vs)`, the factor
/// for the accumulator and the weight of the new value, and updates the running max and sum.
#[inline(always)]
fn softmax_step(s: f32, max: &mut f32, sum: &mut f32) -> (f32, f32) {
    let (ms, vs) = if s > *max {
        let old = *max;
        *max = s;
        (mathf::expf(old - s), 1.0)
    } else {
        (1.0, mathf::expf(s - *max))
    };
    // ggml's `S = S*ms + vs`, contracted to one fused multiply-add by its compiler.
    *sum = sum.mul_add(ms, vs);
    (ms, vs)
}

/// Portable implementation with the same operation order (fused multiply-adds via `mul_add`).
mod scalar {
    use super::{softmax_step, Rows, Scores, DOT_STEP};
    use half::f16;

    pub(super) fn attend(scores: Scores, q: &[f32], rows: &Rows, out: &mut [f32]) {
        let q16: Vec<f32> = q.iter().map(|v| f16::from_f32(*v).to_f32()).collect();
        let mut acc = vec![f16::ZERO; q.len()];
        let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
        for p in rows.first..=rows.last {
            let k = &rows.keys[(rows.row)(rows.keys, p)];
            let s = scores.apply(dot_f16(&q16, k));
            let (ms, vs) = softmax_step(s, &mut max, &mut sum);
            if ms != 1.0 {
                acc.iter_mut()
                    .for_each(|a| *a = f16::from_f32(a.to_f32() * ms));
            }
            let v = &rows.values[(rows.row)(rows.values, p)];
            for (a, x) in acc.iter_mut().zip(v) {
                *a = f16::from_f32(x.to_f32().mul_add(vs, a.to_f32()));
            }
        }
        let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
        for (o, a) in out.iter_mut().zip(&acc) {
            *o = a.to_f32() * inv;
        }
    }

    /// ggml's `vec_dot_f16` on AVX-512: 4 accumulators of 16 lanes, then a fixed reduction.
    fn dot_f16(q: &[f32], k: &[f16]) -> f32 {
        let n = q.len();
        let np = n - n % DOT_STEP;
        let mut acc = [[0f32; 16]; 4];
        for i in (0..np).step_by(DOT_STEP) {
            for (j, a) in acc.iter_mut().enumerate() {
                for (l, lane) in a.iter_mut().enumerate() {
                    let idx = i + 16 * j + l;
                    *lane = k[idx].to_f32().mul_add(q[idx], *lane);
                }
            }
        }
        let lanes: [f32; 16] =
            std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
        let mut sum = super::reduce16(lanes) as f64;
        for idx in np..n {
            sum += (q[idx] * k[idx].to_f32()) as f64;
        }
        sum as f32
    }
}

/// The raw bits of f16 values.
fn f16_bits(s: &[f16]) -> &[u16] {
    // SAFETY: `half::f16` is `repr(transparent)` over `u16`; same size, alignment, validity.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), s.len()) }
}

/// The order in which GCC's `_mm512_reduce_add_ps` sums 16 lanes.
fn reduce16(x: [f32; 16]) -> f32 {
    let h: [f32; 8] = std::array::from_fn(|i| x[i + 8] + x[i]);
    let q: [f32; 4] = std::array::from_fn(|i| h[i + 4] + h[i]);
    (q[0] + q[2]) + (q[1] + q[3])
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{f16_bits as bits, reduce16, softmax_step, Rows, Scores, DOT_STEP};
    use std::arch::x86_64::*;

    /// Sixteen f16 at `p` widened to f32.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load16(s: &[u16]) -> __m512 {
        assert!(s.len() >= 16);
        // SAFETY: 16 readable u16 (checked above); unaligned load.
        _mm512_cvtph_ps(unsafe { _mm256_loadu_si256(s.as_ptr().cast()) })
    }

    /// Stores sixteen f32 rounded to f16 (nearest even).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn store16(d: &mut [u16], v: __m512) {
        assert!(d.len() >= 16);
        let h = _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
        // SAFETY: 16 writable u16 (checked above); unaligned store.
        unsafe { _mm256_storeu_si256(d.as_mut_ptr().cast(), h) }
    }

    /// # Safety
    /// The CPU must support AVX-512F, F16C and FMA; `q.len()` is a multiple of 64.
    #[target_feature(enable = "avx512f,f16c,fma")]
    pub(super) unsafe fn attend(scores: Scores, q: &[f32], rows: &Rows, out: &mut [f32]) {
        let hd = q.len();
        let mut q16 = vec![0u16; hd];
        for (src, dst) in q.chunks_exact(16).zip(q16.chunks_exact_mut(16)) {
            // SAFETY: `src` holds 16 floats; unaligned load.
            store16(dst, unsafe { _mm512_loadu_ps(src.as_ptr()) });
        }
        let mut acc = vec![0u16; hd];
        let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
        for p in rows.first..=rows.last {
            let k = bits(&rows.keys[(rows.row)(rows.keys, p)]);
            let s = scores.apply(dot(&q16, k));
            let (ms, vs) = softmax_step(s, &mut max, &mut sum);
            if ms != 1.0 {
                let m = _mm512_set1_ps(ms);
                for a in acc.chunks_exact_mut(16) {
                    store16(a, _mm512_mul_ps(load16(a), m));
                }
            }
            let v = bits(&rows.values[(rows.row)(rows.values, p)]);
            let w = _mm512_set1_ps(vs);
            for (a, x) in acc.chunks_exact_mut(16).zip(v.chunks_exact(16)) {
                store16(a, _mm512_fmadd_ps(load16(x), w, load16(a)));
            }
        }
        let inv = _mm512_set1_ps(if sum == 0.0 { 0.0 } else { 1.0 / sum });
        for (o, a) in out.chunks_exact_mut(16).zip(acc.chunks_exact(16)) {
            // SAFETY: `o` holds 16 floats; unaligned store.
            unsafe { _mm512_storeu_ps(o.as_mut_ptr(), _mm512_mul_ps(load16(a), inv)) };
        }
    }

    #[target_feature(enable = "avx512f,f16c,fma")]
    fn dot(q16: &[u16], k: &[u16]) -> f32 {
        let mut acc = [_mm512_setzero_ps(); 4];
        for (qc, kc) in q16.chunks_exact(DOT_STEP).zip(k.chunks_exact(DOT_STEP)) {
            for (j, a) in acc.iter_mut().enumerate() {
                let o = 16 * j;
                *a = _mm512_fmadd_ps(load16(&kc[o..]), load16(&qc[o..]), *a);
            }
        }
        let x = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
        let mut lanes = [0f32; 16];
        // SAFETY: `lanes` holds 16 floats; unaligned store.
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), x) };
        reduce16(lanes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attend(
        q: &[f32],
        keys: &[f16],
        values: &[f16],
        first: usize,
        last: usize,
        hd: usize,
    ) -> Vec<f32> {
        let shape = AttnShape {
            n_head: 1,
            n_head_kv: 1,
            head_dim: hd,
            scale: 1.0,
            softcap: 0.0,
        };
        let mut out = vec![0.0; hd];
        attend_one_head(&shape, q, keys, values, 0, first, last, &mut out);
        out
    }

    #[test]
    fn single_position_returns_its_value() {
        let keys = [f16::from_f32(1.0), f16::from_f32(0.0)];
        let values = [f16::from_f32(3.0), f16::from_f32(-2.0)];
        assert_eq!(
            attend(&[0.5, 0.5], &keys, &values, 0, 0, 2),
            vec![3.0, -2.0]
        );
    }

    #[test]
    fn weights_follow_softmax() {
        let keys = [f16::from_f32(0.0), f16::from_f32(1.0)];
        let values = [f16::from_f32(0.0), f16::from_f32(1.0)];
        let out = attend(&[2.0], &keys, &values, 0, 1, 1);
        let want = 2f32.exp() / (1.0 + 2f32.exp());
        assert!((out[0] - want).abs() < 1e-3, "{} vs {want}", out[0]);
        // a window starting at 1 sees only the second value
        assert_eq!(attend(&[2.0], &keys, &values, 1, 1, 1), vec![1.0]);
    }

    #[test]
    fn simd_and_portable_paths_agree_bit_for_bit() {
        let hd = 128;
        let n = 37;
        let mut seed = 7u64;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        };
        let q: Vec<f32> = (0..hd).map(|_| rnd() * 3.0).collect();
        let keys: Vec<f16> = (0..n * hd).map(|_| f16::from_f32(rnd())).collect();
        let values: Vec<f16> = (0..n * hd).map(|_| f16::from_f32(rnd())).collect();
        let row = |_: &[f16], p: usize| p * hd..(p + 1) * hd;
        let rows = Rows {
            keys: &keys,
            values: &values,
            first: 3,
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
            let mut portable = vec![0.0; hd];
            scalar::attend(scores, &q, &rows, &mut portable);
            for isa in crate::cpu::available() {
                let mut simd = vec![0.0; hd];
                attend_rows(isa, scores, &q, &rows, &mut simd);
                assert_eq!(portable, simd, "{isa:?}, softcap {softcap}");
            }
        }
    }

    #[test]
    fn softcap_bounds_scores() {
        let shape = AttnShape {
            n_head: 1,
            n_head_kv: 1,
            head_dim: 1,
            scale: 1.0,
            softcap: 2.0,
        };
        let s = shape.scores();
        assert!((s.apply(1000.0) - 2.0).abs() < 1e-6);
        assert!((s.apply(-1000.0) + 2.0).abs() < 1e-6);
        assert!((s.apply(0.5) - 2.0 * 0.25f32.tanh()).abs() < 1e-7);
    }
}
