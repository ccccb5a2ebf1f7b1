//! Tile kernels for Q8_0 weights (Q8_0 activations), `R` weight rows × `T` tokens per tile in
//! 256-bit registers, each (row, token, block) in as few vector operations as ggml's float
//! order leaves: the eight exact i32 group sums of its AVX2 kernel, their conversion to f32
//! and one fused multiply-add by the product of the two block scales. Two ways to the sums:
//! - AVX2 ([`Signed`]): the activation takes the weight's sign, then `vpmaddubsw` with `|q|`
//!   and `vpmaddwd` with ones;
//! - AVX-512 VNNI in 256-bit registers ([`Vnni`], for CPUs that split 512-bit operations): one
//!   `vpdpbusd` of the weights stored as `q + 128` into the activation's packed correction
//!   (`-128` times each group's sum).
//!
//! What the generic 32-element tiles spend per product besides - the weight's sign work and
//! the product of the two block scales - is done once per row and block: rows are decoded in
//! their product form once per batch, and each row group's scale products (`dx · dy`, the f32
//! product ggml broadcasts) are formed eight tokens per multiply and read back with broadcast
//! loads. On Zen 4 `vpsignb`, `vpmaddubsw`, `vpmaddwd`, `vpdpbusd` and `vfmadd` share the same
//! two pipes, so these are the counts that bound a tile: four per product on AVX2, two with
//! VNNI. The integer sums are exact and every float operation is the one ggml's AVX2 kernel
//! performs, in its order, so the results are the bits of `legacy_body.rs`'s kernel.

use std::arch::x86_64::*;
use std::ops::Range;

use super::common::*;
use crate::quant::gemm::{PackedActs, PAIR_LANES, PAIR_QS};

/// Bytes of one Q8_0 block (f16 scale, 32 signed quants).
const BYTES: usize = 34;

/// How a tile forms a block's eight i32 group sums.
pub(super) trait GroupSums {
    /// Vectors stored per decoded weight block.
    const WORDS: usize;
    /// Whether [`Self::sums`] reads the activations' packed corrections.
    const CORRECTED: bool;
    /// The stored form of a block's 32 quants `q` into `out` ([`Self::WORDS`] vectors).
    ///
    /// # Safety
    /// The CPU must support the form's features.
    unsafe fn decode(q: __m256i, out: &mut [__m256i]);
    /// The group sums of weight block `w` (its stored form) with activation quants `y` and
    /// correction `c` (zero where not [`Self::CORRECTED`]).
    ///
    /// # Safety
    /// As for [`Self::decode`]; `w` points at [`Self::WORDS`] vectors.
    unsafe fn sums(w: *const __m256i, y: __m256i, c: __m256i) -> __m256i;
}

/// AVX2: `q` and `|q|`; `|q| · (y with q's sign)` in `vpmaddubsw`, pairs summed by `vpmaddwd`.
pub(super) struct Signed;

impl GroupSums for Signed {
    const WORDS: usize = 2;
    const CORRECTED: bool = false;
    #[inline(always)]
    unsafe fn decode(q: __m256i, out: &mut [__m256i]) {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            out[0] = q;
            out[1] = _mm256_sign_epi8(q, q);
        }
    }
    #[inline(always)]
    unsafe fn sums(w: *const __m256i, y: __m256i, _c: __m256i) -> __m256i {
        // SAFETY: the caller guarantees AVX2 and two vectors at `w`.
        unsafe {
            let pairs = _mm256_maddubs_epi16(*w.add(1), _mm256_sign_epi8(y, *w));
            _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
        }
    }
}

/// AVX-512 VNNI (256-bit): `q + 128` as unsigned bytes, `vpdpbusd` into the correction.
pub(super) struct Vnni;

impl GroupSums for Vnni {
    const WORDS: usize = 1;
    const CORRECTED: bool = true;
    #[inline(always)]
    unsafe fn decode(q: __m256i, out: &mut [__m256i]) {
        // SAFETY: the caller guarantees AVX2.
        out[0] = unsafe { _mm256_xor_si256(q, _mm256_set1_epi8(-128)) };
    }
    #[inline(always)]
    unsafe fn sums(w: *const __m256i, y: __m256i, c: __m256i) -> __m256i {
        // SAFETY: the caller guarantees AVX-512 VNNI and VL and a vector at `w`.
        unsafe { _mm256_dpbusd_epi32(c, *w, y) }
    }
}

/// The AVX2 entry (see `quant::gemm::gemm` for the contract): 3 × 3 tiles (2 × 3 to 4 × 3 were
/// within noise of each other on Zen 4; 3 × 4 and 4 × 2 slower).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm_avx2(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    // SAFETY: the caller guarantees the CPU features.
    unsafe { gemm_shape::<Signed, 3, 3>(w, rows, acts, pairs, out, t_stride, r_stride) }
}

/// The 256-bit VNNI entry (see `quant::gemm::gemm` for the contract): 4 × 4 tiles, sixteen
/// accumulators and each token's quants and correction in AVX-512's 32 registers.
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL, VNNI, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub(super) unsafe fn gemm_vnni(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    // SAFETY: the caller guarantees the CPU features.
    unsafe { gemm_shape::<Vnni, 4, 4>(w, rows, acts, pairs, out, t_stride, r_stride) }
}

/// A Q8_0 product in tiles of `R` rows × `T` tokens (remainders in one-row and narrower tiles),
/// group sums formed by `K`.
///
/// # Safety
/// As for the entry of `K`'s form.
#[inline(always)]
unsafe fn gemm_shape<K: GroupSums, const R: usize, const T: usize>(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    let nb = acts.n_blocks;
    let row_bytes = nb * BYTES;
    let (t_begin, t_end) = (2 * pairs.start, (2 * pairs.end).min(acts.n_tokens));
    if t_begin >= t_end {
        return;
    }
    // Scale products are formed for a chunk of whole tiles and whole vectors of eight tokens
    // at a time (their least common multiple), so that they stay in L1 beside the decoded
    // rows whatever the row length.
    let chunk = (1..=8).map(|k| k * T).find(|c| c % 8 == 0).unwrap_or(8 * T);
    let scales = TokenScales::new(acts, t_begin..t_end, chunk);
    let mut dec = Rows::new(R, nb, K::WORDS);
    let mut prods = vec![0f32; nb * R * chunk];
    let mut r0 = 0;
    while r0 < rows {
        let nr = (rows - r0).min(R);
        // SAFETY: the caller guarantees the CPU features.
        unsafe { dec.fill::<K>(&w[r0 * row_bytes..(r0 + nr) * row_bytes], nr) };
        let mut c0 = t_begin;
        while c0 < t_end {
            // SAFETY: the caller guarantees the CPU features.
            unsafe { dec.scale_products(&scales, c0 - t_begin, chunk, nr, &mut prods) };
            let c_end = (c0 + chunk).min(t_end);
            let mut t0 = c0;
            while t0 < c_end {
                let nt = (c_end - t0).min(T);
                let mut put = |r: usize, t: usize, v: f32| {
                    out[(t0 + t - t_begin) * t_stride + (r0 + r) * r_stride] = v;
                };
                let prods = Products {
                    d: &prods,
                    rows: nr,
                    stride: chunk,
                    first: t0 - c0,
                };
                // SAFETY (every call): the caller guarantees the CPU features.
                unsafe {
                    if nr == R {
                        tokens::<K, R, T>(nt, &dec, 0, &prods, acts, t0, &mut put);
                    } else {
                        for r in 0..nr {
                            let put_r = &mut |_, t, v| put(r, t, v);
                            tokens::<K, 1, T>(nt, &dec, r, &prods, acts, t0, put_r);
                        }
                    }
                }
                t0 += nt;
            }
            c0 = c_end;
        }
        r0 += nr;
    }
}

/// [`tile`] for `R` rows and `nt` (1 to `MAX_T`) tokens.
#[inline(always)]
unsafe fn tokens<K: GroupSums, const R: usize, const MAX_T: usize>(
    nt: usize,
    dec: &Rows,
    row0: usize,
    prods: &Products,
    acts: &PackedActs,
    tok0: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    // SAFETY (every call): the caller guarantees the CPU features.
    unsafe {
        match nt.min(MAX_T) {
            1 => tile::<K, R, 1>(dec, row0, prods, acts, tok0, put),
            2 => tile::<K, R, 2>(dec, row0, prods, acts, tok0, put),
            3 => tile::<K, R, 3>(dec, row0, prods, acts, tok0, put),
            4 => tile::<K, R, 4>(dec, row0, prods, acts, tok0, put),
            5 => tile::<K, R, 5>(dec, row0, prods, acts, tok0, put),
            6 => tile::<K, R, 6>(dec, row0, prods, acts, tok0, put),
            7 => tile::<K, R, 7>(dec, row0, prods, acts, tok0, put),
            _ => tile::<K, R, 8>(dec, row0, prods, acts, tok0, put),
        }
    }
}

/// The activation scales of a token range as f32, per block the tokens side by side (a chunk
/// of slack after the last token, so any chunk's start reads whole chunks).
struct TokenScales {
    stride: usize,
    d: Vec<f32>,
}

impl TokenScales {
    fn new(acts: &PackedActs, tokens: Range<usize>, chunk: usize) -> Self {
        let nb = acts.n_blocks;
        let stride = tokens.len() + chunk;
        let mut d = vec![0f32; nb * stride];
        for (i, tok) in tokens.enumerate() {
            let lanes = acts.lanes_start(tok);
            for b in 0..nb {
                d[b * stride + i] = acts.d[lanes + b * PAIR_LANES];
            }
        }
        TokenScales { stride, d }
    }
}

/// A few weight rows decoded once for a whole batch: per row and block its quants in the
/// tile's form ([`GroupSums::WORDS`] vectors) and its scale as f32.
struct Rows {
    nb: usize,
    words: usize,
    quants: Vec<__m256i>,
    scales: Vec<f32>,
}

impl Rows {
    fn new(rows: usize, nb: usize, words: usize) -> Self {
        Rows {
            nb,
            words,
            // SAFETY: an all-zero `__m256i` is a valid value.
            quants: vec![unsafe { _mm256_setzero_si256() }; words * rows * nb],
            scales: vec![0.0; rows * nb],
        }
    }

    /// Decodes the `nr` rows of `w` (back to back, whole rows).
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    #[inline(always)]
    unsafe fn fill<K: GroupSums>(&mut self, w: &[u8], nr: usize) {
        assert!(nr * self.nb <= self.scales.len() && w.len() >= nr * self.nb * BYTES);
        assert_eq!(self.words, K::WORDS);
        for (i, blk) in w.chunks_exact(BYTES).take(nr * self.nb).enumerate() {
            // SAFETY: the caller guarantees the CPU features.
            unsafe {
                K::decode(ld32(&blk[2..34]), &mut self.quants[K::WORDS * i..]);
                self.scales[i] = f16([blk[0], blk[1]]);
            }
        }
    }

    /// For the `nr` decoded rows and every block, the products of the row's scale with the
    /// scales of tokens `first..first + chunk` of `scales` into `prods` (`chunk` floats per
    /// row and block, blocks outermost; `chunk` a multiple of 8).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn scale_products(
        &self,
        scales: &TokenScales,
        first: usize,
        chunk: usize,
        nr: usize,
        prods: &mut [f32],
    ) {
        let (nb, stride) = (self.nb, scales.stride);
        assert!(chunk.is_multiple_of(8) && first + chunk <= stride);
        assert!(prods.len() >= nb * nr * chunk && nr * nb <= self.scales.len());
        for b in 0..nb {
            for r in 0..nr {
                let dx = _mm256_set1_ps(self.scales[r * nb + b]);
                let (src, dst) = (b * stride + first, (b * nr + r) * chunk);
                for t in (0..chunk).step_by(8) {
                    // SAFETY: the caller guarantees AVX2; both vectors lie within the lengths
                    // asserted above.
                    unsafe {
                        let dy = _mm256_loadu_ps(scales.d.as_ptr().add(src + t));
                        _mm256_storeu_ps(prods.as_mut_ptr().add(dst + t), _mm256_mul_ps(dx, dy));
                    }
                }
            }
        }
    }
}

/// The scale products of a group of rows for a tile's tokens: row `r`, block `b`, token `t` of
/// the tile at `d[(b * rows + r) * stride + first + t]`.
struct Products<'a> {
    d: &'a [f32],
    rows: usize,
    stride: usize,
    first: usize,
}

/// `R` decoded rows from `row0` × the packed tokens `tok0..tok0 + T`, with the scale products
/// [`Rows::scale_products`] left in `prods` for these rows and tokens; hands each result to
/// `put(row, t, value)`.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // tiles index rows and tokens of several arrays at once
unsafe fn tile<K: GroupSums, const R: usize, const T: usize>(
    dec: &Rows,
    row0: usize,
    prods: &Products,
    acts: &PackedActs,
    tok0: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    let nb = acts.n_blocks;
    // Bounds are checked once here; the loop reads through raw pointers within them.
    assert!(dec.nb == nb && K::WORDS * (row0 + R) * nb <= dec.quants.len());
    let (rows, stride) = (prods.rows, prods.stride);
    assert!(row0 + R <= rows && prods.first + T <= stride && T <= 8);
    assert!(prods.d.len() >= nb * rows * stride);
    let last_slot = ((tok0 + T - 1) / 2 + 1) * nb;
    assert!(acts.qs.len() >= last_slot * PAIR_QS);
    assert!(!K::CORRECTED || acts.corr.len() >= last_slot * PAIR_LANES);
    let (qp, cp) = (acts.qs.as_ptr(), acts.corr.as_ptr());
    let qo: [usize; T] = std::array::from_fn(|t| acts.qs_start(tok0 + t));
    let lo: [usize; T] = std::array::from_fn(|t| acts.lanes_start(tok0 + t));
    // SAFETY (whole body): the caller guarantees the CPU features; every pointer read below
    // stays within the ranges asserted above.
    unsafe {
        let wp = dec.quants.as_ptr().add(K::WORDS * row0 * nb);
        let pp = prods.d.as_ptr().add(prods.first);
        let mut acc = [[_mm256_setzero_ps(); T]; R];
        for b in 0..nb {
            let y: [__m256i; T] =
                std::array::from_fn(|t| _mm256_loadu_si256(qp.add(qo[t] + b * PAIR_QS).cast()));
            let c: [__m256i; T] = std::array::from_fn(|t| {
                if K::CORRECTED {
                    _mm256_loadu_si256(cp.add(lo[t] + b * PAIR_LANES).cast())
                } else {
                    _mm256_setzero_si256()
                }
            });
            for r in 0..R {
                let wq = wp.add(K::WORDS * (r * nb + b));
                for t in 0..T {
                    let p = K::sums(wq, y[t], c[t]);
                    let d = _mm256_broadcast_ss(&*pp.add((b * rows + row0 + r) * stride + t));
                    acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r][t]);
                }
            }
        }
        for r in 0..R {
            for t in 0..T {
                put(r, t, hsum_f32_8(acc[r][t]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::gemm::pack_acts;
    use crate::quant::{quantize_row, GgmlType};

    /// The VNNI tiles (which only CPUs that split 512-bit operations take) give the AVX2 tiles'
    /// bits, checked on every CPU with AVX-512 VNNI: weights over all byte values, token counts
    /// and ranges off the 4 × 4 tile and the 8-token chunks, both output strides.
    #[test]
    fn vnni_tiles_give_the_avx2_bits() {
        use std::arch::is_x86_feature_detected as has;
        let vnni = has!("avx512f")
            && has!("avx512bw")
            && has!("avx512vl")
            && has!("avx512vnni")
            && has!("avx2")
            && has!("fma")
            && has!("f16c");
        if !vnni {
            return;
        }
        for (n, rows, tokens) in [(96, 7, 5), (320, 9, 14), (64, 10, 19), (3072, 4, 33)] {
            let mut state = (n * 31 + rows) as u32;
            let mut byte = || {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 24) as u8
            };
            let nb = n / 32;
            let mut w = vec![0u8; rows * nb * BYTES];
            for (i, blk) in w.chunks_exact_mut(BYTES).enumerate() {
                let d = half::f16::from_f32(0.001 + (i % 7) as f32 * 0.003);
                blk[..2].copy_from_slice(&d.to_le_bytes());
                blk[2..].iter_mut().for_each(|q| *q = byte());
            }
            let x: Vec<f32> = (0..tokens * n)
                .map(|_| byte() as f32 / 127.5 - 1.0)
                .collect();
            let mut a = vec![0u8; tokens * nb * BYTES];
            for (src, dst) in x.chunks_exact(n).zip(a.chunks_exact_mut(nb * BYTES)) {
                quantize_row(GgmlType::Q8_0, src, dst);
            }
            let acts = pack_acts(GgmlType::Q8_0, n, &a, tokens);
            let pairs = acts.n_pairs();
            for range in [0..pairs, pairs / 2..pairs] {
                let nt = tokens - 2 * range.start;
                for (ts, rs) in [(rows, 1), (1, nt)] {
                    let mut outs = [vec![f32::NAN; rows * nt], vec![f32::NAN; rows * nt]];
                    // SAFETY: the CPU has every feature either entry needs (checked above);
                    // the lengths are whole rows.
                    unsafe {
                        gemm_avx2(&w, rows, &acts, range.clone(), &mut outs[0], ts, rs);
                        gemm_vnni(&w, rows, &acts, range.clone(), &mut outs[1], ts, rs);
                    }
                    let bits = |o: &[f32]| o.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(&outs[0]),
                        bits(&outs[1]),
                        "n {n} rows {rows} {range:?}"
                    );
                    assert!(outs[0].iter().all(|v| v.is_finite()));
                }
            }
        }
    }
}
