//! AVX2 tile kernels for the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): `NR` weight
//! rows × `NT` tokens per call, on activations repacked by `quant::gemm` (each token's 32
//! quants, scale and correction lanes are one 256-bit half of its pair's slot). A weight block is
//! decoded once per tile; each (row, token) product forms the eight i32 lanes of ggml's AVX2
//! kernel (sums of groups of four byte products, exact) and then scales, accumulates and sums
//! them in its float order, so the results are the bits of `legacy_body.rs`'s kernels.

use std::arch::x86_64::*;
use std::ops::Range;

use super::common::*;
use super::tiles32::{Q4_0, Q4_1, Q5_0, Q5_1, Q8_0};
use crate::quant::gemm::{PackedActs, PAIR_LANES, PAIR_QS};

/// How a format's decoded quants meet the activation bytes in `vpmaddubsw` (u8 × i8, i16 pairs
/// that saturate): every way below keeps each pair's sum within i16 and gives the exact groups
/// of four of the signed product.
#[derive(PartialEq, Eq)]
pub(super) enum Lanes {
    /// Unsigned quants (formats with a minimum): multiplied as they are.
    Unsigned,
    /// Quants stored as `value + off` with small `off` (Q4_0, Q5_0): multiplied unsigned, then
    /// the packed `corr` (`-off` times the activation groups' sums) is added.
    Offset,
    /// Signed quants (Q8_0, whose offset form would saturate): `|q|` times `y` with `q`'s sign.
    Signed,
}

/// One weight format's block for the AVX2 kernels.
pub(super) trait Avx2Block {
    /// Bytes per block.
    const BYTES: usize;
    /// Has a minimum (f16 at bytes 2..4) and pairs with Q8_1 activations.
    const HAS_MIN: bool;
    /// How [`Self::quants`] are multiplied.
    const LANES: Lanes;
    /// The 32 quants of `b` in the form [`Self::LANES`] names.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    unsafe fn quants(b: &[u8]) -> __m256i;
}

impl Avx2Block for Q4_0 {
    const BYTES: usize = 18;
    const HAS_MIN: bool = false;
    const LANES: Lanes = Lanes::Offset;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { nibbles_32(&b[2..18]) }
    }
}

impl Avx2Block for Q4_1 {
    const BYTES: usize = 20;
    const HAS_MIN: bool = true;
    const LANES: Lanes = Lanes::Unsigned;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { nibbles_32(&b[4..20]) }
    }
}

impl Avx2Block for Q5_0 {
    const BYTES: usize = 22;
    const HAS_MIN: bool = false;
    const LANES: Lanes = Lanes::Offset;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { fifth_bit(&b[2..22]) }
    }
}

impl Avx2Block for Q5_1 {
    const BYTES: usize = 24;
    const HAS_MIN: bool = true;
    const LANES: Lanes = Lanes::Unsigned;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { fifth_bit(&b[4..24]) }
    }
}

impl Avx2Block for Q8_0 {
    const BYTES: usize = 34;
    const HAS_MIN: bool = false;
    const LANES: Lanes = Lanes::Signed;
    #[inline(always)]
    unsafe fn quants(b: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { ld32(&b[2..34]) }
    }
}

/// Five-bit quants from `qh` (4 bytes) and the 16 nibble bytes after it, as unsigned bytes.
#[inline]
#[target_feature(enable = "avx2")]
fn fifth_bit(b: &[u8]) -> __m256i {
    let hi = _mm256_and_si256(
        bits_to_bytes_32([b[0], b[1], b[2], b[3]]),
        _mm256_set1_epi8(0x10),
    );
    _mm256_or_si256(nibbles_32(&b[4..20]), hi)
}

/// The tile-kernel entry for format `B` (see `quant::gemm::gemm` for the contract). Each group
/// of `NR` weight rows is decoded once into a small buffer ([`Decoded`]) and then meets every
/// token of the range in tiles of `NR` rows × `NT` tokens. Shapes measured on Zen 3 (pp512,
/// 2 threads): offset formats 8 × 2 (about 188 t/s on Qwen2.5-0.5B against 163 for 2 × 4 and
/// 176 for 3 × 3: each activation load serves more rows; looping tokens outside rows did not
/// help), the others 4 × 3 (SmolLM2's Q4_1: 459 against 421 for 8 × 2).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm<B: Avx2Block>(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    // SAFETY (every call): the caller guarantees the CPU features.
    unsafe {
        match B::LANES {
            Lanes::Offset => gemm_shape::<B, 8, 2>(w, rows, acts, pairs, out, t_stride, r_stride),
            _ => gemm_shape::<B, 4, 3>(w, rows, acts, pairs, out, t_stride, r_stride),
        }
    }
}

/// [`gemm`] with tiles of `NR` rows × `NT` tokens (remainders in narrower tiles).
///
/// # Safety
/// As for [`gemm`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm_shape<B: Avx2Block, const NR: usize, const NT: usize>(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    let nb = acts.n_blocks;
    let row_bytes = nb * B::BYTES;
    let (t_begin, t_end) = (2 * pairs.start, (2 * pairs.end).min(acts.n_tokens));
    let mut dec = Decoded::new(NR, nb, B::HAS_MIN);
    let mut r0 = 0;
    while r0 < rows {
        let nr = (rows - r0).min(NR);
        // SAFETY: the caller guarantees the CPU features.
        unsafe { dec.fill::<B>(&w[r0 * row_bytes..(r0 + nr) * row_bytes], nr) };
        let mut t0 = t_begin;
        while t0 < t_end {
            let nt = (t_end - t0).min(NT);
            let mut put = |r: usize, t: usize, v: f32| {
                out[(t0 + t - t_begin) * t_stride + (r0 + r) * r_stride] = v;
            };
            // SAFETY (every call): the caller guarantees the CPU features.
            unsafe {
                if nr == NR {
                    tokens::<B, _, NR, NT>(nt, &dec.rows(0), acts, t0, &mut put);
                } else {
                    for r in 0..nr {
                        let one = dec.rows(r);
                        tokens::<B, _, 1, NT>(nt, &one, acts, t0, &mut |_, t, v| put(r, t, v));
                    }
                }
            }
            t0 += nt;
        }
        r0 += nr;
    }
}

/// [`tile`] for `NR` rows and `nt` (1 to `MAX_NT`) tokens.
#[inline(always)]
unsafe fn tokens<B: Avx2Block, W: WeightRows, const NR: usize, const MAX_NT: usize>(
    nt: usize,
    w: &W,
    acts: &PackedActs,
    tok0: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    // SAFETY (every call): the caller guarantees the CPU features.
    unsafe {
        match nt.min(MAX_NT) {
            1 => tile::<B, W, NR, 1>(w, acts, tok0, put),
            2 => tile::<B, W, NR, 2>(w, acts, tok0, put),
            3 => tile::<B, W, NR, 3>(w, acts, tok0, put),
            4 => tile::<B, W, NR, 4>(w, acts, tok0, put),
            5 => tile::<B, W, NR, 5>(w, acts, tok0, put),
            6 => tile::<B, W, NR, 6>(w, acts, tok0, put),
            7 => tile::<B, W, NR, 7>(w, acts, tok0, put),
            _ => tile::<B, W, NR, 8>(w, acts, tok0, put),
        }
    }
}

/// Weight rows as a tile reads them: per row `r` and block `b`, the 32 quants in the form
/// [`Avx2Block::LANES`] names, the scale and (formats with a minimum) the minimum.
pub(super) trait WeightRows {
    /// Blocks per row.
    fn n_blocks(&self) -> usize;
    /// Rows available (a tile reads rows `0..NR`).
    fn n_rows(&self) -> usize;
    /// Called once per block before its rows are read (prefetching).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    unsafe fn begin_block(&self, _b: usize) {}
    /// Quants of row `r`, block `b`.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C; `r < n_rows()`, `b < n_blocks()`.
    unsafe fn quants(&self, r: usize, b: usize) -> __m256i;
    /// Scale of row `r`, block `b`.
    ///
    /// # Safety
    /// As for [`Self::quants`].
    unsafe fn scale(&self, r: usize, b: usize) -> f32;
    /// Minimum of row `r`, block `b` (formats with a minimum).
    ///
    /// # Safety
    /// As for [`Self::quants`].
    unsafe fn min(&self, r: usize, b: usize) -> f32;
}

/// Rows straight from the weight bytes, decoded as they are read (one token: each block is
/// used once). With `prefetch`, fetches the rows after these at the pace they are consumed.
pub(super) struct RawRows<'a, B> {
    w: &'a [u8],
    row_bytes: usize,
    n_rows: usize,
    nb: usize,
    prefetch: bool,
    _format: std::marker::PhantomData<B>,
}

impl<'a, B: Avx2Block> RawRows<'a, B> {
    /// `n_rows` rows of `nb` blocks, `row_bytes` apart, from `w`.
    ///
    /// Panics if `w` is too short.
    pub(super) fn new(
        w: &'a [u8],
        row_bytes: usize,
        n_rows: usize,
        nb: usize,
        prefetch: bool,
    ) -> Self {
        assert!(n_rows > 0 && row_bytes >= nb * B::BYTES);
        assert!(w.len() >= (n_rows - 1) * row_bytes + nb * B::BYTES);
        RawRows {
            w,
            row_bytes,
            n_rows,
            nb,
            prefetch,
            _format: std::marker::PhantomData,
        }
    }

    #[inline(always)]
    fn block(&self, r: usize, b: usize) -> &[u8] {
        // SAFETY: `r < n_rows` and `b < nb` keep the block within `w` (checked in `new`).
        unsafe {
            std::slice::from_raw_parts(
                self.w.as_ptr().add(r * self.row_bytes + b * B::BYTES),
                B::BYTES,
            )
        }
    }
}

impl<B: Avx2Block> WeightRows for RawRows<'_, B> {
    fn n_blocks(&self) -> usize {
        self.nb
    }
    fn n_rows(&self) -> usize {
        self.n_rows
    }
    #[inline(always)]
    unsafe fn begin_block(&self, b: usize) {
        if self.prefetch {
            let ahead = self
                .w
                .as_ptr()
                .wrapping_add(self.n_rows * (self.row_bytes + b * B::BYTES));
            // SAFETY: prefetches never fault, wherever they point.
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64).cast());
                if self.n_rows * B::BYTES > 128 {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(128).cast());
                }
            }
        }
    }
    #[inline(always)]
    unsafe fn quants(&self, r: usize, b: usize) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        unsafe { B::quants(self.block(r, b)) }
    }
    #[inline(always)]
    unsafe fn scale(&self, r: usize, b: usize) -> f32 {
        let blk = self.block(r, b);
        // SAFETY: the caller guarantees F16C.
        unsafe { f16([blk[0], blk[1]]) }
    }
    #[inline(always)]
    unsafe fn min(&self, r: usize, b: usize) -> f32 {
        let blk = self.block(r, b);
        // SAFETY: the caller guarantees F16C.
        unsafe { f16([blk[2], blk[3]]) }
    }
}

/// A few weight rows decoded once for a whole batch: per row, its blocks' quants (32 bytes
/// each, in the form [`Avx2Block::LANES`] names), scales and minimums as f32.
struct Decoded {
    nb: usize,
    quants: Vec<__m256i>,
    scales: Vec<f32>,
    mins: Vec<f32>,
    filled: usize,
}

/// Row `first` onwards of a [`Decoded`] buffer.
struct DecodedRows<'a> {
    dec: &'a Decoded,
    first: usize,
}

impl Decoded {
    fn new(rows: usize, nb: usize, has_min: bool) -> Self {
        Decoded {
            nb,
            // SAFETY: an all-zero `__m256i` is a valid value.
            quants: vec![unsafe { _mm256_setzero_si256() }; rows * nb],
            scales: vec![0.0; rows * nb],
            mins: vec![0.0; if has_min { rows * nb } else { 0 }],
            filled: 0,
        }
    }

    /// Decodes the `nr` rows of `w` (back to back, whole rows).
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    #[inline(always)]
    unsafe fn fill<B: Avx2Block>(&mut self, w: &[u8], nr: usize) {
        assert!(nr * self.nb <= self.scales.len());
        for (i, blk) in w.chunks_exact(B::BYTES).take(nr * self.nb).enumerate() {
            // SAFETY: the caller guarantees the CPU features.
            unsafe {
                self.quants[i] = B::quants(blk);
                self.scales[i] = f16([blk[0], blk[1]]);
                if B::HAS_MIN {
                    self.mins[i] = f16([blk[2], blk[3]]);
                }
            }
        }
        self.filled = nr;
    }

    fn rows(&self, first: usize) -> DecodedRows<'_> {
        assert!(first < self.filled);
        DecodedRows { dec: self, first }
    }
}

impl WeightRows for DecodedRows<'_> {
    fn n_blocks(&self) -> usize {
        self.dec.nb
    }
    fn n_rows(&self) -> usize {
        self.dec.filled - self.first
    }
    #[inline(always)]
    unsafe fn quants(&self, r: usize, b: usize) -> __m256i {
        let at = (self.first + r) * self.dec.nb + b;
        // SAFETY: the caller keeps `r`, `b` in range, so `at` is within the filled rows.
        unsafe { *self.dec.quants.get_unchecked(at) }
    }
    #[inline(always)]
    unsafe fn scale(&self, r: usize, b: usize) -> f32 {
        // SAFETY: as for `quants`.
        unsafe {
            *self
                .dec
                .scales
                .get_unchecked((self.first + r) * self.dec.nb + b)
        }
    }
    #[inline(always)]
    unsafe fn min(&self, r: usize, b: usize) -> f32 {
        // SAFETY: as for `quants`; the buffer has minimums whenever the format does.
        unsafe {
            *self
                .dec
                .mins
                .get_unchecked((self.first + r) * self.dec.nb + b)
        }
    }
}

/// `NR` weight rows of `w` × the packed tokens `tok0..tok0 + NT`; hands each result to
/// `put(row, t, value)`.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // tiles index rows and tokens of several arrays at once
pub(super) unsafe fn tile<B: Avx2Block, W: WeightRows, const NR: usize, const NT: usize>(
    w: &W,
    acts: &PackedActs,
    tok0: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    let nb = acts.n_blocks;
    // Bounds are checked once here; the loop reads through raw pointers within them.
    assert!(w.n_blocks() == nb && w.n_rows() >= NR);
    let last_slot = ((tok0 + NT - 1) / 2 + 1) * nb;
    assert!(acts.qs.len() >= last_slot * PAIR_QS && acts.d.len() >= last_slot * PAIR_LANES);
    let offset = B::LANES == Lanes::Offset;
    assert!(!offset || acts.corr.len() >= last_slot * PAIR_LANES);
    assert!(NR <= 8 && NT <= 8);
    assert!(!B::HAS_MIN || (nb > 0 && acts.s.len() >= (nb - 1) * acts.s_stride + tok0 + 8));
    let (qp, dp, cp, sp) = (
        acts.qs.as_ptr(),
        acts.d.as_ptr(),
        acts.corr.as_ptr(),
        acts.s.as_ptr(),
    );
    // Per token: its first slot's offset in `qs` bytes and in scale/correction lanes.
    let qo: [usize; NT] = std::array::from_fn(|t| acts.qs_start(tok0 + t));
    let lo: [usize; NT] = std::array::from_fn(|t| acts.lanes_start(tok0 + t));
    // SAFETY (whole body): the caller guarantees the CPU features; every pointer read below
    // stays within the ranges asserted above.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); NT]; NR];
        for b in 0..nb {
            w.begin_block(b);
            // Row by row, so that only one row's quants are live beside the accumulators.
            for r in 0..NR {
                let q = w.quants(r, b);
                let ax = match B::LANES {
                    Lanes::Signed => _mm256_sign_epi8(q, q),
                    _ => q,
                };
                let dx = _mm256_set1_ps(w.scale(r, b));
                for t in 0..NT {
                    let y = _mm256_loadu_si256(qp.add(qo[t] + b * PAIR_QS).cast());
                    let y = match B::LANES {
                        Lanes::Signed => _mm256_sign_epi8(y, q),
                        _ => y,
                    };
                    let mut p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, y), ones);
                    if offset {
                        let c = _mm256_loadu_si256(cp.add(lo[t] + b * PAIR_LANES).cast());
                        p = _mm256_add_epi32(p, c);
                    }
                    let d = _mm256_mul_ps(dx, _mm256_loadu_ps(dp.add(lo[t] + b * PAIR_LANES)));
                    acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r][t]);
                }
            }
        }
        for r in 0..NR {
            // The minimum's running term, tokens in lanes (the `s` rows have slack for whole
            // vectors): multiply then add per block, as the single-row kernels do per token.
            let mut summs = _mm256_setzero_ps();
            if B::HAS_MIN {
                for b in 0..nb {
                    let mx = _mm256_set1_ps(w.min(r, b));
                    let sy = _mm256_loadu_ps(sp.add(b * acts.s_stride + tok0));
                    summs = _mm256_add_ps(summs, _mm256_mul_ps(mx, sy));
                }
            }
            let mut extra = [0f32; 8];
            _mm256_storeu_ps(extra.as_mut_ptr(), summs);
            for t in 0..NT {
                put(r, t, hsum_f32_8(acc[r][t]) + extra[t]);
            }
        }
    }
}
