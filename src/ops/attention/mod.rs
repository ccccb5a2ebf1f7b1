//! Scaled dot-product attention of query tokens over a sequence's cached keys and values,
//! causal, with an optional sliding window. Cache rows are stored in a [`KvType`] each for keys
//! and values; f16 keys with f16 values (the default) take the paths below, every other pair
//! the one-token path of [`typed`] for all batch sizes, as ggml's CPU backend does.
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

pub mod chunked;
mod iq4_nl;
mod kv_type;
#[cfg(target_arch = "x86_64")]
mod one_token;
pub mod rotation;
pub mod tiled;
mod typed;
#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;

use crate::cpu::Isa;
use crate::ops::mathf;
use half::f16;

pub use kv_type::KvType;

/// One layer's cache rows of one kind (keys or values) for a sequence: position `p` is the
/// `row_bytes` bytes at `p * row_bytes`, `n_head_kv * head_dim` values of `ty`.
#[derive(Clone, Copy, Debug)]
pub struct KvRows<'a> {
    pub ty: KvType,
    pub bytes: &'a [u8],
    pub row_bytes: usize,
}

impl<'a> KvRows<'a> {
    /// Position `p`'s row.
    fn row(&self, p: usize) -> &'a [u8] {
        let start = p * self.row_bytes;
        assert!(
            start + self.row_bytes <= self.bytes.len(),
            "attention: position {p} beyond the cache"
        );
        &self.bytes[start..start + self.row_bytes]
    }

    /// The rows as f16 values, when they are f16.
    pub fn as_f16(&self) -> Option<&'a [f16]> {
        if self.ty != KvType::F16 || !(self.bytes.as_ptr() as usize).is_multiple_of(2) {
            return None;
        }
        // SAFETY: `half::f16` is `repr(transparent)` over `u16`: any two bytes are a valid
        // value; the pointer is 2-aligned (checked) and the length is rounded down.
        Some(unsafe {
            std::slice::from_raw_parts(self.bytes.as_ptr().cast(), self.bytes.len() / 2)
        })
    }
}

/// Cache rows as ggml's flash attention reads them: llama.cpp casts an f32 cache to f16 before
/// its flash attention, so f32 rows are rounded to f16 (a copy of the positions in use);
/// other types are read as stored.
pub enum AttnRows<'a> {
    Stored(KvRows<'a>),
    Cast { values: Vec<f16>, row: usize },
}

impl<'a> AttnRows<'a> {
    /// The first `n_pos` positions of `rows`, cast when they are f32.
    pub fn new(rows: KvRows<'a>, n_pos: usize) -> AttnRows<'a> {
        if rows.ty != KvType::F32 {
            return AttnRows::Stored(rows);
        }
        let row = rows.row_bytes / 4;
        let values = rows.bytes[..n_pos * rows.row_bytes]
            .chunks_exact(4)
            .map(|b| f16::from_f32(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect();
        AttnRows::Cast { values, row }
    }

    /// The rows attention reads.
    pub fn rows(&self) -> KvRows<'_> {
        match self {
            AttnRows::Stored(r) => *r,
            AttnRows::Cast { values, row } => KvRows {
                ty: KvType::F16,
                // SAFETY: f16 is two plain bytes with no invalid patterns; the byte view covers
                // exactly the values' memory and lives no longer than the borrow of `values`.
                bytes: unsafe {
                    std::slice::from_raw_parts(values.as_ptr().cast(), values.len() * 2)
                },
                row_bytes: row * 2,
            },
        }
    }
}

/// [`attend_heads`] over cache rows of any types: f16 keys and values go to the f16 kernels,
/// other pairs to the typed path. `head_dim` must be a multiple of both types' block size.
#[allow(clippy::too_many_arguments)]
pub fn attend_heads_rows(
    shape: &AttnShape,
    q: &[f32],
    keys: &KvRows,
    values: &KvRows,
    kv_head: usize,
    first: usize,
    last: usize,
    out: &mut [f32],
) {
    if let (Some(k), Some(v)) = (keys.as_f16(), values.as_f16()) {
        return attend_heads(shape, q, k, v, kv_head, first, last, out);
    }
    let hd = shape.head_dim;
    assert!(
        q.len().is_multiple_of(hd) && out.len() == q.len(),
        "attention: {} query values for heads of {hd}",
        q.len()
    );
    for t in [keys.ty, values.ty] {
        assert!(
            hd.is_multiple_of(t.block_elems()),
            "attention: {t} rows with heads of {hd}"
        );
    }
    typed::attend(
        shape.scores(),
        q,
        hd,
        keys,
        values,
        kv_head,
        first,
        last,
        out,
    );
}

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

/// Attention output for adjacent query heads that share the KV head `kv_head` (a grouped-query
/// group or part of one): `q` and `out` hold `head_dim` values per head; `keys`/`values` are
/// the sequence's cache rows, each `n_head_kv * head_dim` long, for positions `first..=last`.
/// Each head's result has the bits it has when computed alone; the SIMD kernels interleave the heads position by
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
            Isa::Avx512 => return unsafe { x86_avx512::attend(scores, q, hd, rows, out) },
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
    softmax_step_with(s, max, sum, mathf::expf)
}

/// [`softmax_step`] with `exp` for `expf` (one with its bits).
#[inline(always)]
fn softmax_step_with(s: f32, max: &mut f32, sum: &mut f32, exp: impl Fn(f32) -> f32) -> (f32, f32) {
    let (ms, vs) = if s > *max {
        let old = *max;
        *max = s;
        (exp(old - s), 1.0)
    } else {
        (1.0, exp(s - *max))
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
    pub(super) fn dot_f16(q: &[f32], k: &[f16]) -> f32 {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded pseudo-random float in `[-half_width, half_width)` (a 64-bit LCG's top bits).
    pub(super) fn uniform(seed: &mut u64, half_width: f32) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * half_width
    }

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
        attend_heads(&shape, q, keys, values, 0, first, last, &mut out);
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
        let mut rnd = || uniform(&mut seed, 2.0);
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

    /// Exact attention (f64) of one head over decoded rows.
    fn reference(q: &[f32], keys: &[Vec<f32>], values: &[Vec<f32>], scale: f32) -> Vec<f32> {
        let s: Vec<f64> = keys
            .iter()
            .map(|k| k.iter().zip(q).map(|(a, b)| (a * b) as f64).sum::<f64>() * scale as f64)
            .collect();
        let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
        let total: f64 = w.iter().sum();
        (0..q.len())
            .map(|d| {
                (w.iter()
                    .zip(values)
                    .map(|(w, v)| w * v[d] as f64)
                    .sum::<f64>()
                    / total) as f32
            })
            .collect()
    }

    #[test]
    fn every_cache_type_pair_attends_like_exact_attention_over_its_rows() {
        let (hd, n_kv, n) = (64, 2, 40);
        let mut seed = 99u64;
        let mut rnd = || uniform(&mut seed, 1.0);
        let group = 3;
        let kv_dim = n_kv * hd;
        let k32: Vec<Vec<f32>> = (0..n)
            .map(|_| (0..kv_dim).map(|_| rnd() * 2.0).collect())
            .collect();
        let v32: Vec<Vec<f32>> = (0..n)
            .map(|_| (0..kv_dim).map(|_| rnd()).collect())
            .collect();
        let q: Vec<f32> = (0..group * hd).map(|_| rnd() * 2.0).collect();
        let shape = AttnShape {
            n_head: n_kv * group,
            n_head_kv: n_kv,
            head_dim: hd,
            scale: 0.125,
            softcap: 0.0,
        };
        let encode = |t: KvType, rows: &[Vec<f32>]| -> (Vec<u8>, Vec<Vec<f32>>) {
            let rb = t.row_bytes(kv_dim);
            let mut bytes = vec![0u8; rows.len() * rb];
            let mut decoded = Vec::new();
            for (r, b) in rows.iter().zip(bytes.chunks_exact_mut(rb)) {
                t.encode(r, b);
                let mut d = vec![0f32; kv_dim];
                t.decode(b, &mut d);
                decoded.push(d);
            }
            (bytes, decoded)
        };
        for kt in KvType::ALL {
            for vt in [KvType::F16, KvType::F32, KvType::Q8_0, KvType::Q4_0, kt] {
                let (kb, kd) = encode(kt, &k32);
                let (vb, vd) = encode(vt, &v32);
                let keys = KvRows {
                    ty: kt,
                    bytes: &kb,
                    row_bytes: kt.row_bytes(kv_dim),
                };
                let values = KvRows {
                    ty: vt,
                    bytes: &vb,
                    row_bytes: vt.row_bytes(kv_dim),
                };
                let (first, last) = (2, n - 1);
                let mut out = vec![0f32; group * hd];
                attend_heads_rows(&shape, &q, &keys, &values, 1, first, last, &mut out);
                let head = |rows: &[Vec<f32>]| -> Vec<Vec<f32>> {
                    rows[first..=last]
                        .iter()
                        .map(|r| r[hd..2 * hd].to_vec())
                        .collect()
                };
                for h in 0..group {
                    let qh = &q[h * hd..][..hd];
                    let want = reference(qh, &head(&kd), &head(&vd), 0.125);
                    let got = &out[h * hd..][..hd];
                    // The query is converted for the key type (q8: steps of amax/127, scores
                    // off by up to ~0.05 here) and f16 values accumulate in f16.
                    for (d, (a, b)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (a - b).abs() < 0.02,
                            "K {kt} V {vt} head {h} dim {d}: {a} vs {b}"
                        );
                    }
                    // a head alone gets the bits it gets in the group
                    let mut alone = vec![0f32; hd];
                    attend_heads_rows(&shape, qh, &keys, &values, 1, first, last, &mut alone);
                    assert_eq!(alone, got, "K {kt} V {vt} head {h}");
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
/// Thread CPU time per call of the one-token kernels for a GQA group at depth 1024, its heads together and
/// one by one (by hand: `cargo test --release --lib attention_timing -- --ignored --nocapture`;
/// no assertion, the numbers are for reading).
#[cfg(test)]
mod timing {
    use super::*;

    /// The least thread CPU time per call over five batches of 60 calls (the machine may be
    /// shared; CPU time leaves out the time the thread waits for a core).
    fn best(mut f: impl FnMut()) -> f64 {
        let cpu = || {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: FFI; `t` is a valid, writable timespec.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
            t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
        };
        (0..5)
            .map(|_| {
                let t = cpu();
                (0..60).for_each(|_| f());
                (cpu() - t) / 60.0
            })
            .fold(f64::INFINITY, f64::min)
    }

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
            let grouped = best(|| attend_heads(&shape, &q, &keys, &values, 1, 0, n - 1, &mut out));
            let single = best(|| {
                for h in 0..group {
                    attend_heads(
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
            });
            // the same group over q8_0 keys and values
            let rb = KvType::Q8_0.row_bytes(kv);
            let encode = |rows: &[f16]| -> Vec<u8> {
                let mut out = vec![0u8; n * rb];
                let mut row = vec![0f32; kv];
                for (src, dst) in rows.chunks_exact(kv).zip(out.chunks_exact_mut(rb)) {
                    row.iter_mut().zip(src).for_each(|(d, s)| *d = s.to_f32());
                    KvType::Q8_0.encode(&row, dst);
                }
                out
            };
            let (kq, vq) = (encode(&keys), encode(&values));
            let (kr, vr) = (
                KvRows {
                    ty: KvType::Q8_0,
                    bytes: &kq,
                    row_bytes: rb,
                },
                KvRows {
                    ty: KvType::Q8_0,
                    bytes: &vq,
                    row_bytes: rb,
                },
            );
            let q8 = best(|| attend_heads_rows(&shape, &q, &kr, &vr, 1, 0, n - 1, &mut out));
            // the group's chunks of the split path for long contexts, one after the other
            let mut part = vec![0f32; group * (hd + 2)];
            let long = best(|| {
                for c0 in (0..n).step_by(256) {
                    let rows = Rows {
                        keys: &keys,
                        values: &values,
                        first: c0,
                        last: (c0 + 255).min(n - 1),
                        row: &|_: &[f16], p: usize| p * kv + hd..p * kv + 2 * hd,
                    };
                    chunked::chunk(crate::cpu::isa(), shape.scores(), &q, hd, &rows, &mut part);
                }
            });
            eprintln!("hd {hd} group {group}: chunked {:.1} us", long * 1e6);
            eprintln!(
                "hd {hd} group {group}: grouped {:.1} us, one by one {:.1} us, q8_0 grouped {:.1} us",
                grouped * 1e6,
                single * 1e6,
                q8 * 1e6
            );
        }
    }
}
