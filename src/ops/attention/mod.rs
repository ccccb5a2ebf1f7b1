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
    attend_heads(shape, q, keys, values, kv_head, first, last, out);
}

/// Attention output for adjacent query heads that share the KV head `kv_head` (a grouped-query
/// group or part of one): `q` and `out` hold `head_dim` values per head. Each head's result has
/// the bits [`attend_one_head`] gives it; the SIMD kernels interleave the heads position by
/// position, so each key and value row is read once for all of them and the heads' dependency
/// chains (the f16 accumulator, the softmax) overlap.
#[allow(clippy::too_many_arguments)]
pub fn attend_heads(
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
    assert!(
        q.len().is_multiple_of(hd) && out.len() == q.len(),
        "attention: {} query values for heads of {hd}",
        q.len()
    );
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
    attend_rows(crate::cpu::isa(), shape.scores(), q, hd, &rows, out);
}

/// The heads in `q` (`hd` values each) over `rows` with the kernels of `isa` (which this CPU
/// must support).
fn attend_rows(isa: Isa, scores: Scores, q: &[f32], hd: usize, rows: &Rows, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if hd.is_multiple_of(DOT_STEP) {
        match isa {
            // SAFETY: the caller guarantees the CPU supports `isa` (AVX-512F, F16C, FMA).
            Isa::Avx512 => return unsafe { x86::attend(scores, q, hd, rows, out) },
            // SAFETY: as above (AVX2, F16C, FMA).
            Isa::Avx2 => return unsafe { x86_avx2::attend(scores, q, hd, rows, out) },
            _ => {}
        }
    }
    let _ = isa;
    for (qh, oh) in q.chunks_exact(hd).zip(out.chunks_exact_mut(hd)) {
        scalar::attend(scores, qh, rows, oh);
    }
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

/// Sixteen floats on a cache line of their own: the SIMD kernels' widened rows live in these,
/// so that a 16-lane store and the loads that read it back never straddle two lines (a
/// straddling store is not forwarded to the load, which then waits for it to retire).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// Zeroed lines for `n` floats (`n` a multiple of 16), seen as one flat slice by [`flat`].
fn lines(n: usize) -> Vec<Line> {
    vec![Line([0.0; 16]); n / 16]
}

fn flat(l: &[Line]) -> &[f32] {
    // SAFETY: `Line` is `repr(C)` around `[f32; 16]` with no padding (64 bytes, align 64), so
    // the lines are contiguous floats.
    unsafe { std::slice::from_raw_parts(l.as_ptr().cast(), l.len() * 16) }
}

/// The lines as f16 bits (twice as many values as floats).
fn flat_bits_mut(l: &mut [Line]) -> &mut [u16] {
    // SAFETY: as in `flat`; any bit pattern is a valid u16, and u16's alignment divides 64.
    unsafe { std::slice::from_raw_parts_mut(l.as_mut_ptr().cast(), l.len() * 32) }
}

fn flat_mut(l: &mut [Line]) -> &mut [f32] {
    // SAFETY: as in `flat`; the borrow is unique.
    unsafe { std::slice::from_raw_parts_mut(l.as_mut_ptr().cast(), l.len() * 16) }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{
        f16_bits as bits, flat, flat_bits_mut, flat_mut, lines, softmax_step, Rows, Scores,
        DOT_STEP,
    };
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

    /// Sixteen f32 at the start of `s`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load16f(s: &[f32]) -> __m512 {
        assert!(s.len() >= 16);
        // SAFETY: 16 readable floats (checked above); unaligned load.
        unsafe { _mm512_loadu_ps(s.as_ptr()) }
    }

    /// Widens the f16 `src` into `dst` (the same length).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn widen(src: &[u16], dst: &mut [f32]) {
        for (s, d) in src.chunks_exact(16).zip(dst.chunks_exact_mut(16)) {
            // SAFETY: `d` holds 16 floats; unaligned store.
            unsafe { _mm512_storeu_ps(d.as_mut_ptr(), load16(s)) };
        }
    }

    /// # Safety
    /// The CPU must support AVX-512F, F16C and FMA; `hd` is a multiple of 64 and divides
    /// `q.len()`, which `out.len()` equals.
    ///
    /// The query is rounded to f16 and widened back once, and each key and value row is widened
    /// once per position for all heads: widening is exact, so every product is the one ggml
    /// forms from the f16 values.
    #[target_feature(enable = "avx512f,f16c,fma")]
    pub(super) unsafe fn attend(
        scores: Scores,
        q: &[f32],
        hd: usize,
        rows: &Rows,
        out: &mut [f32],
    ) {
        let n = q.len() / hd;
        let mut q16 = vec![0u16; q.len()];
        for (src, dst) in q.chunks_exact(16).zip(q16.chunks_exact_mut(16)) {
            store16(dst, load16f(src));
        }
        let mut qr = lines(q.len());
        widen(&q16, flat_mut(&mut qr));
        let qr = flat(&qr);
        let (mut kl, mut vl) = (lines(hd), lines(hd));
        let (k, v) = (flat_mut(&mut kl), flat_mut(&mut vl));
        let mut acc_lines = lines(q.len().div_ceil(32) * 16);
        let acc = &mut flat_bits_mut(&mut acc_lines)[..q.len()];
        let mut state = vec![(f32::NEG_INFINITY, 0f32); n];
        let mut weight = vec![0f32; n];
        for p in rows.first..=rows.last {
            let k_row = bits(&rows.keys[(rows.row)(rows.keys, p)]);
            // One head reads the f16 row directly; several share it widened once.
            if n > 1 {
                widen(k_row, k);
            }
            for (h, ((max, sum), w)) in state.iter_mut().zip(&mut weight).enumerate() {
                let qh = &qr[h * hd..][..hd];
                let s = scores.apply(if n > 1 {
                    dot(qh, k)
                } else {
                    dot_half(qh, k_row)
                });
                let (ms, vs) = softmax_step(s, max, sum);
                if ms != 1.0 {
                    let m = _mm512_set1_ps(ms);
                    for a in acc[h * hd..][..hd].chunks_exact_mut(16) {
                        store16(a, _mm512_mul_ps(load16(a), m));
                    }
                }
                *w = vs;
            }
            let v_row = bits(&rows.values[(rows.row)(rows.values, p)]);
            if n > 1 {
                widen(v_row, v);
                for (acc, &vs) in acc.chunks_exact_mut(hd).zip(&weight) {
                    let w = _mm512_set1_ps(vs);
                    for (a, x) in acc.chunks_exact_mut(16).zip(v.chunks_exact(16)) {
                        store16(a, _mm512_fmadd_ps(load16f(x), w, load16(a)));
                    }
                }
            } else {
                let w = _mm512_set1_ps(weight[0]);
                for (a, x) in acc.chunks_exact_mut(16).zip(v_row.chunks_exact(16)) {
                    store16(a, _mm512_fmadd_ps(load16(x), w, load16(a)));
                }
            }
        }
        for ((out, acc), (_, sum)) in out
            .chunks_exact_mut(hd)
            .zip(acc.chunks_exact(hd))
            .zip(&state)
        {
            let inv = _mm512_set1_ps(if *sum == 0.0 { 0.0 } else { 1.0 / sum });
            for (o, a) in out.chunks_exact_mut(16).zip(acc.chunks_exact(16)) {
                // SAFETY: `o` holds 16 floats; unaligned store.
                unsafe { _mm512_storeu_ps(o.as_mut_ptr(), _mm512_mul_ps(load16(a), inv)) };
            }
        }
    }

    /// ggml's f16 dot on AVX-512 over f16 values already widened (`q`, `k`).
    #[target_feature(enable = "avx512f,f16c,fma")]
    fn dot(q: &[f32], k: &[f32]) -> f32 {
        let mut acc = [_mm512_setzero_ps(); 4];
        for (qc, kc) in q.chunks_exact(DOT_STEP).zip(k.chunks_exact(DOT_STEP)) {
            for (j, a) in acc.iter_mut().enumerate() {
                let o = 16 * j;
                *a = _mm512_fmadd_ps(load16f(&kc[o..]), load16f(&qc[o..]), *a);
            }
        }
        finish_dot(acc)
    }

    /// [`dot`] reading the key row as f16.
    #[target_feature(enable = "avx512f,f16c,fma")]
    fn dot_half(q: &[f32], k: &[u16]) -> f32 {
        let mut acc = [_mm512_setzero_ps(); 4];
        for (qc, kc) in q.chunks_exact(DOT_STEP).zip(k.chunks_exact(DOT_STEP)) {
            for (j, a) in acc.iter_mut().enumerate() {
                let o = 16 * j;
                *a = _mm512_fmadd_ps(load16(&kc[o..]), load16f(&qc[o..]), *a);
            }
        }
        finish_dot(acc)
    }

    /// The dot's accumulators added per lane as `(a0 + a2) + (a1 + a3)`, then across lanes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn finish_dot(acc: [__m512; 4]) -> f32 {
        let x = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
        reduce16_in_register(x)
    }

    /// [`reduce16`] of the lanes of `x` without a trip through memory: the upper half onto the
    /// lower, the upper quarter onto the lower, then `(q0 + q2) + (q1 + q3)` (addition is
    /// commutative, so the operand order inside each sum does not change the bits).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn reduce16_in_register(x: __m512) -> f32 {
        let lo = _mm512_castps512_ps256(x);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(x)));
        let h = _mm256_add_ps(hi, lo);
        let q = _mm_add_ps(_mm256_extractf128_ps::<1>(h), _mm256_castps256_ps128(h));
        let pairs = _mm_add_ps(q, _mm_movehl_ps(q, q));
        _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)))
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
        // three heads sharing the KV head, each checked alone against the portable one
        let heads = 3;
        let q: Vec<f32> = (0..heads * hd).map(|_| rnd() * 3.0).collect();
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
            let mut portable = vec![0.0; heads * hd];
            for (qh, oh) in q.chunks_exact(hd).zip(portable.chunks_exact_mut(hd)) {
                scalar::attend(scores, qh, &rows, oh);
            }
            for isa in crate::cpu::available() {
                for n in [1, heads] {
                    let mut simd = vec![0.0; n * hd];
                    attend_rows(isa, scores, &q[..n * hd], hd, &rows, &mut simd);
                    assert_eq!(
                        portable[..n * hd],
                        simd,
                        "{isa:?}, {n} heads, softcap {softcap}"
                    );
                }
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
/// Time per call of the one-token kernels for a GQA group at depth 1024, its heads together and
/// one by one (by hand: `cargo test --release --lib attention_timing -- --ignored --nocapture`;
/// no assertion, the numbers are for reading).
#[cfg(test)]
mod timing {
    use super::*;

    #[test]
    #[ignore]
    fn attention_timing() {
        for (hd, nkv, group) in [(128usize, 2usize, 6usize), (64, 2, 7)] {
            let n = 1024;
            let kv = nkv * hd;
            let keys: Vec<f16> = (0..n * kv)
                .map(|i| f16::from_f32(((i * 7919) % 1000) as f32 / 1000.0 - 0.5))
                .collect();
            let values: Vec<f16> = (0..n * kv)
                .map(|i| f16::from_f32(((i * 104729) % 1000) as f32 / 1000.0 - 0.5))
                .collect();
            let q: Vec<f32> = (0..group * hd)
                .map(|i| ((i * 31) % 100) as f32 / 50.0 - 1.0)
                .collect();
            let shape = AttnShape {
                n_head: nkv * group,
                n_head_kv: nkv,
                head_dim: hd,
                scale: 0.1,
                softcap: 0.0,
            };
            let mut out = vec![0f32; group * hd];
            let t = std::time::Instant::now();
            let iters = 300;
            for _ in 0..iters {
                attend_heads(&shape, &q, &keys, &values, 1, 0, n - 1, &mut out);
            }
            let grouped = t.elapsed().as_secs_f64() / iters as f64;
            let t = std::time::Instant::now();
            for _ in 0..iters {
                for h in 0..group {
                    attend_one_head(
                        &shape,
                        &q[h * hd..][..hd],
                        &keys,
                        &values,
                        1,
                        0,
                        n - 1,
                        &mut out[h * hd..][..hd],
                    );
                }
            }
            let single = t.elapsed().as_secs_f64() / iters as f64;
            eprintln!(
                "hd {hd} group {group}: grouped {:.1} us, one by one {:.1} us",
                grouped * 1e6,
                single * 1e6
            );
        }
    }
}
