//! The AVX2 tile kernel for Q8_0 weights (Q8_0 activations): `NR` weight rows × `NT` tokens
//! per tile, each (row, token, block) in the five vector operations ggml's float order leaves
//! room for: the activation's sign flip, `vpmaddubsw`, `vpmaddwd`, the i32 → f32 conversion and
//! the fused multiply-add. What the generic 32-element tile ([`super::tiles32_avx2`]) spends
//! per product besides - the weight's absolute value and the product of the two block scales -
//! is done once per row and block: rows are decoded with their `|q|` beside `q`, and each
//! tile's scale products (`dx · dy`, the f32 product ggml broadcasts) are formed eight tokens
//! per multiply before its main loop and read back with broadcast loads. The integer group
//! sums are exact and every float operation is the one ggml's AVX2 kernel performs in its
//! order, so the results are the bits of `legacy_body.rs`'s kernel.

use std::arch::x86_64::*;
use std::ops::Range;

use super::common::*;
use crate::quant::gemm::{PackedActs, PAIR_LANES, PAIR_QS};

/// Bytes of one Q8_0 block (f16 scale, 32 signed quants).
const BYTES: usize = 34;
/// Rows per tile.
const NR: usize = 3;
/// Tokens per tile.
const NT: usize = 3;

/// The tile-kernel entry for Q8_0 (see `quant::gemm::gemm` for the contract).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    // SAFETY: the caller guarantees the CPU features.
    unsafe { gemm_shape::<NR, NT>(w, rows, acts, pairs, out, t_stride, r_stride) }
}

/// [`gemm`] with tiles of `R` rows × `T` tokens (remainders in one-row and narrower tiles).
///
/// # Safety
/// As for [`gemm`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm_shape<const R: usize, const T: usize>(
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
    let scales = TokenScales::new(acts, t_begin..t_end);
    let mut dec = Rows::new(R, nb);
    let mut prods = vec![0f32; nb * R * scales.stride];
    let mut r0 = 0;
    while r0 < rows {
        let nr = (rows - r0).min(R);
        // SAFETY (every call): the caller guarantees the CPU features.
        unsafe {
            dec.fill(&w[r0 * row_bytes..(r0 + nr) * row_bytes], nr);
            dec.scale_products(&scales, nr, &mut prods);
        }
        let mut t0 = t_begin;
        while t0 < t_end {
            let nt = (t_end - t0).min(T);
            let mut put = |r: usize, t: usize, v: f32| {
                out[(t0 + t - t_begin) * t_stride + (r0 + r) * r_stride] = v;
            };
            let prods = Products {
                d: &prods,
                rows: nr,
                stride: scales.stride,
                first: t0 - t_begin,
            };
            // SAFETY (every call): the caller guarantees the CPU features.
            unsafe {
                if nr == R {
                    tokens::<R, T>(nt, &dec, 0, &prods, acts, t0, &mut put);
                } else {
                    for r in 0..nr {
                        tokens::<1, T>(nt, &dec, r, &prods, acts, t0, &mut |_, t, v| put(r, t, v));
                    }
                }
            }
            t0 += nt;
        }
        r0 += nr;
    }
}

/// [`tile`] for `R` rows and `nt` (1 to `MAX_T`) tokens.
#[inline(always)]
unsafe fn tokens<const R: usize, const MAX_T: usize>(
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
            1 => tile::<R, 1>(dec, row0, prods, acts, tok0, put),
            2 => tile::<R, 2>(dec, row0, prods, acts, tok0, put),
            3 => tile::<R, 3>(dec, row0, prods, acts, tok0, put),
            4 => tile::<R, 4>(dec, row0, prods, acts, tok0, put),
            5 => tile::<R, 5>(dec, row0, prods, acts, tok0, put),
            6 => tile::<R, 6>(dec, row0, prods, acts, tok0, put),
            7 => tile::<R, 7>(dec, row0, prods, acts, tok0, put),
            _ => tile::<R, 8>(dec, row0, prods, acts, tok0, put),
        }
    }
}

/// The activation scales of a token range as f32, per block the tokens side by side (eight
/// floats of slack after the last token, so any token starts a whole vector).
struct TokenScales {
    stride: usize,
    d: Vec<f32>,
}

impl TokenScales {
    fn new(acts: &PackedActs, tokens: Range<usize>) -> Self {
        let nb = acts.n_blocks;
        let stride = tokens.len() + 8;
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

/// A few weight rows decoded once for a whole batch: per row and block its quants and their
/// absolute values (side by side) and its scale as f32.
struct Rows {
    nb: usize,
    quants: Vec<__m256i>,
    scales: Vec<f32>,
}

impl Rows {
    fn new(rows: usize, nb: usize) -> Self {
        Rows {
            nb,
            // SAFETY: an all-zero `__m256i` is a valid value.
            quants: vec![unsafe { _mm256_setzero_si256() }; 2 * rows * nb],
            scales: vec![0.0; rows * nb],
        }
    }

    /// Decodes the `nr` rows of `w` (back to back, whole rows).
    ///
    /// # Safety
    /// The CPU must support AVX2 and F16C.
    #[inline(always)]
    unsafe fn fill(&mut self, w: &[u8], nr: usize) {
        assert!(nr * self.nb <= self.scales.len() && w.len() >= nr * self.nb * BYTES);
        for (i, blk) in w.chunks_exact(BYTES).take(nr * self.nb).enumerate() {
            // SAFETY: the caller guarantees the CPU features.
            unsafe {
                let q = ld32(&blk[2..34]);
                self.quants[2 * i] = q;
                self.quants[2 * i + 1] = _mm256_sign_epi8(q, q);
                self.scales[i] = f16([blk[0], blk[1]]);
            }
        }
    }

    /// For the `nr` decoded rows and every block, the products of the row's scale with each
    /// token's scale in `scales` into `prods` (`scales.stride` floats per row and block, blocks
    /// outermost).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline(always)]
    unsafe fn scale_products(&self, scales: &TokenScales, nr: usize, prods: &mut [f32]) {
        let (nb, stride) = (self.nb, scales.stride);
        assert!(prods.len() >= nb * nr * stride && nr * nb <= self.scales.len());
        // Whole vectors up to the last token: the slack holds the rest.
        let n_tok = stride - 8;
        for b in 0..nb {
            for r in 0..nr {
                let dx = _mm256_set1_ps(self.scales[r * nb + b]);
                let (src, dst) = (b * stride, (b * nr + r) * stride);
                for t in (0..n_tok).step_by(8) {
                    // SAFETY: the caller guarantees AVX2; `t + 8 <= stride` keeps both
                    // vectors within their rows.
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
unsafe fn tile<const R: usize, const T: usize>(
    dec: &Rows,
    row0: usize,
    prods: &Products,
    acts: &PackedActs,
    tok0: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    let nb = acts.n_blocks;
    // Bounds are checked once here; the loop reads through raw pointers within them.
    assert!(dec.nb == nb && 2 * (row0 + R) * nb <= dec.quants.len());
    let (rows, stride) = (prods.rows, prods.stride);
    assert!(row0 + R <= rows && prods.first + T <= stride && T <= 8);
    assert!(prods.d.len() >= nb * rows * stride);
    let last_slot = ((tok0 + T - 1) / 2 + 1) * nb;
    assert!(acts.qs.len() >= last_slot * PAIR_QS);
    let qp = acts.qs.as_ptr();
    let qo: [usize; T] = std::array::from_fn(|t| acts.qs_start(tok0 + t));
    // SAFETY (whole body): the caller guarantees the CPU features; every pointer read below
    // stays within the ranges asserted above.
    unsafe {
        let wp = dec.quants.as_ptr().add(2 * row0 * nb);
        let pp = prods.d.as_ptr().add(prods.first);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [[_mm256_setzero_ps(); T]; R];
        for b in 0..nb {
            for r in 0..R {
                let q = *wp.add(2 * (r * nb + b));
                let ax = *wp.add(2 * (r * nb + b) + 1);
                for t in 0..T {
                    let y = _mm256_loadu_si256(qp.add(qo[t] + b * PAIR_QS).cast());
                    let p =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(y, q)), ones);
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
