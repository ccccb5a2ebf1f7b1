//! F16 and BF16 weights on x86: the single-row dot product, tile kernels for batches and
//! matrix-vector kernels for one token, in AVX2 (256-bit) and AVX-512 (512-bit) forms.
//!
//! Two float orders, chosen by the rows' length, as llama.cpp's AVX2 build chooses: rows whose
//! length is a multiple of eight take tinyBLAS's order ([`half_lanes8`]: one 8-lane accumulator
//! per product); other rows take ggml's AVX2 `ggml_vec_dot_f16` shape, kept here: per 32
//! elements four 8-lane FMA accumulators (element `i` in accumulator `i / 8 % 4`, lane `i % 8`),
//! then 8-element steps into the first accumulator, the four summed as `(a0 + a1) + (a2 + a3)`
//! and reduced by [`hsum_f32_8`], then the last `n % 8` products added one by one. A 512-bit
//! register holds accumulators 0 and 1 (or 2 and 3) side by side, so the AVX-512 kernels do the
//! same operations on the same lanes and give the same bits. Activations arrive already rounded
//! to the weight format (`quant::gemm` widens them to f32 once per matrix product), so a tile or
//! matrix-vector kernel only widens each weight element once for all the tokens it meets.

use std::arch::x86_64::*;
use std::ops::Range;

use super::common::{halves_512, hsum_f32_8};
use super::half_lanes8::{self, LANES};
use crate::quant::gemm::PackedActs;

/// How a 16-bit weight format widens to f32.
pub(super) trait Half {
    /// Eight elements at `p` (16 bytes) as f32.
    ///
    /// # Safety
    /// 16 readable bytes at `p`; the CPU must support AVX2 and F16C.
    unsafe fn widen8(p: *const u8) -> __m256;
    /// Sixteen elements at `p` (32 bytes) as f32.
    ///
    /// # Safety
    /// 32 readable bytes at `p`; the CPU must support AVX-512 F.
    unsafe fn widen16(p: *const u8) -> __m512;
    /// Eight elements at `lo` in lanes 0-7 and eight at `hi` in lanes 8-15, as f32.
    ///
    /// # Safety
    /// 16 readable bytes at each; the CPU must support AVX-512 F.
    unsafe fn widen8_pair(lo: *const u8, hi: *const u8) -> __m512;
    /// One element.
    fn widen1(b: [u8; 2]) -> f32;
}

/// Two 16-byte loads side by side in one 256-bit register.
///
/// # Safety
/// 16 readable bytes at each; the CPU must support AVX2.
#[inline(always)]
unsafe fn load_pair(lo: *const u8, hi: *const u8) -> __m256i {
    // SAFETY: the caller guarantees both loads and AVX2.
    unsafe {
        _mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm_loadu_si128(lo.cast())),
            _mm_loadu_si128(hi.cast()),
        )
    }
}

/// IEEE half weights.
pub(super) struct F16;
/// bfloat16 weights.
pub(super) struct Bf16;

impl Half for F16 {
    #[inline(always)]
    unsafe fn widen8(p: *const u8) -> __m256 {
        // SAFETY: the caller guarantees 16 readable bytes and F16C.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
    #[inline(always)]
    unsafe fn widen16(p: *const u8) -> __m512 {
        // SAFETY: the caller guarantees 32 readable bytes and AVX-512 F.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }
    #[inline(always)]
    unsafe fn widen8_pair(lo: *const u8, hi: *const u8) -> __m512 {
        // SAFETY: the caller guarantees both loads and AVX-512 F.
        unsafe { _mm512_cvtph_ps(load_pair(lo, hi)) }
    }
    #[inline(always)]
    fn widen1(b: [u8; 2]) -> f32 {
        crate::quant::f16_to_f32(b)
    }
}

impl Half for Bf16 {
    #[inline(always)]
    unsafe fn widen8(p: *const u8) -> __m256 {
        // SAFETY: the caller guarantees 16 readable bytes and AVX2.
        unsafe {
            let w = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(w))
        }
    }
    #[inline(always)]
    unsafe fn widen16(p: *const u8) -> __m512 {
        // SAFETY: the caller guarantees 32 readable bytes and AVX-512 F.
        unsafe {
            let w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p.cast()));
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(w))
        }
    }
    #[inline(always)]
    unsafe fn widen8_pair(lo: *const u8, hi: *const u8) -> __m512 {
        // SAFETY: the caller guarantees both loads and AVX-512 F.
        unsafe {
            let w = _mm512_cvtepu16_epi32(load_pair(lo, hi));
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(w))
        }
    }
    #[inline(always)]
    fn widen1(b: [u8; 2]) -> f32 {
        crate::quant::bf16_to_f32(b)
    }
}

/// Where a kernel reads one activation row: f32 (widened once per matrix product) or the
/// 16-bit format itself (the single-row kernel).
pub(super) trait Acts: Copy {
    /// Eight elements from `i` on.
    ///
    /// # Safety
    /// Elements `i..i + 8` exist; the CPU must support AVX2 and F16C.
    unsafe fn load8(self, i: usize) -> __m256;
    /// Sixteen elements from `i` on.
    ///
    /// # Safety
    /// Elements `i..i + 16` exist; the CPU must support AVX-512 F.
    unsafe fn load16(self, i: usize) -> __m512;
    /// Element `i`.
    ///
    /// # Safety
    /// Element `i` exists.
    unsafe fn get(self, i: usize) -> f32;
}

impl Acts for *const f32 {
    #[inline(always)]
    unsafe fn load8(self, i: usize) -> __m256 {
        // SAFETY: the caller guarantees the elements and the CPU features.
        unsafe { _mm256_loadu_ps(self.add(i)) }
    }
    #[inline(always)]
    unsafe fn load16(self, i: usize) -> __m512 {
        // SAFETY: as above.
        unsafe { _mm512_loadu_ps(self.add(i)) }
    }
    #[inline(always)]
    unsafe fn get(self, i: usize) -> f32 {
        // SAFETY: the caller guarantees the element.
        unsafe { *self.add(i) }
    }
}

/// An activation row in the weight's own 16-bit format.
struct HalfRow<H>(*const u8, std::marker::PhantomData<H>);

impl<H> Clone for HalfRow<H> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<H> Copy for HalfRow<H> {}

impl<H: Half> Acts for HalfRow<H> {
    #[inline(always)]
    unsafe fn load8(self, i: usize) -> __m256 {
        // SAFETY: the caller guarantees the elements and the CPU features.
        unsafe { H::widen8(self.0.add(2 * i)) }
    }
    #[inline(always)]
    unsafe fn load16(self, i: usize) -> __m512 {
        // SAFETY: as above.
        unsafe { H::widen16(self.0.add(2 * i)) }
    }
    #[inline(always)]
    unsafe fn get(self, i: usize) -> f32 {
        // SAFETY: the caller guarantees the element.
        unsafe { H::widen1([*self.0.add(2 * i), *self.0.add(2 * i + 1)]) }
    }
}

/// The end of one product: accumulators from the 32-element steps, the 8-element steps from
/// element `i` on into the first, the reduction and the one-by-one tail.
///
/// # Safety
/// `w` and `x` hold `n` elements (2 and 4 bytes each); the CPU must support AVX2, FMA, F16C.
#[inline(always)]
unsafe fn finish<H: Half, X: Acts>(
    mut acc: [__m256; 4],
    w: *const u8,
    x: X,
    mut i: usize,
    n: usize,
) -> f32 {
    // SAFETY: every offset stays below `n` elements, which the caller guarantees.
    unsafe {
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(H::widen8(w.add(2 * i)), x.load8(i), acc[0]);
            i += 8;
        }
        let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut s = hsum_f32_8(sum);
        while i < n {
            s += H::widen1([*w.add(2 * i), *w.add(2 * i + 1)]) * x.get(i);
            i += 1;
        }
        s
    }
}

/// `out[r][t]` = the product of weight row `w[r]` and activation row `x[t]` (`n` elements each),
/// 256-bit vectors.
///
/// # Safety
/// As for [`finish`], for every row and token.
// Indexing reads better than iterators over three array dimensions at once.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn tile256<H: Half, X: Acts, const R: usize, const T: usize>(
    w: [*const u8; R],
    x: [X; T],
    n: usize,
    out: &mut [[f32; T]; R],
) {
    let mut acc = [[[_mm256_setzero_ps(); 4]; T]; R];
    let mut i = 0;
    // SAFETY: offsets stay below `n` elements.
    unsafe {
        while i + 32 <= n {
            for k in 0..4 {
                for r in 0..R {
                    let wv = H::widen8(w[r].add(2 * (i + 8 * k)));
                    for t in 0..T {
                        let xv = x[t].load8(i + 8 * k);
                        acc[r][t][k] = _mm256_fmadd_ps(wv, xv, acc[r][t][k]);
                    }
                }
            }
            i += 32;
        }
        for r in 0..R {
            for t in 0..T {
                out[r][t] = finish::<H, X>(acc[r][t], w[r], x[t], i, n);
            }
        }
    }
}

/// [`tile256`] with 512-bit vectors: one register holds accumulators 0 and 1, another 2 and 3.
///
/// # Safety
/// As for [`tile256`]; the CPU must also support AVX-512 F.
// Indexing reads better than iterators over three array dimensions at once.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn tile512<H: Half, X: Acts, const R: usize, const T: usize>(
    w: [*const u8; R],
    x: [X; T],
    n: usize,
    out: &mut [[f32; T]; R],
) {
    let mut acc = [[[_mm512_setzero_ps(); 2]; T]; R];
    let mut i = 0;
    // SAFETY: offsets stay below `n` elements.
    unsafe {
        while i + 32 <= n {
            for h in 0..2 {
                for r in 0..R {
                    let wv = H::widen16(w[r].add(2 * (i + 16 * h)));
                    for t in 0..T {
                        let xv = x[t].load16(i + 16 * h);
                        acc[r][t][h] = _mm512_fmadd_ps(wv, xv, acc[r][t][h]);
                    }
                }
            }
            i += 32;
        }
        for r in 0..R {
            for t in 0..T {
                let [a01, a23] = acc[r][t];
                let ([a0, a1], [a2, a3]) = (halves_512(a01), halves_512(a23));
                let quarters = [a0, a1, a2, a3];
                out[r][t] = finish::<H, X>(quarters, w[r], x[t], i, n);
            }
        }
    }
}

/// `src` rounded to IEEE half (to nearest even, as F16C rounds for ggml) and widened back into
/// `dst`, eight elements at a time; returns how many were done (the rest, fewer than eight, are
/// the caller's).
///
/// # Safety
/// The CPU must support AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn round_trip_f16(src: &[f32], dst: &mut [f32]) -> usize {
    let main = src.len().min(dst.len()) / 8 * 8;
    for (s, d) in src[..main]
        .chunks_exact(8)
        .zip(dst[..main].chunks_exact_mut(8))
    {
        // SAFETY: both chunks hold eight f32; the caller guarantees the CPU features.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(s.as_ptr()));
            _mm256_storeu_ps(d.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
    main
}

/// Which kernel a tile runs: `ggml_vec_dot_f16`'s order in 256-bit or 512-bit vectors, or
/// tinyBLAS's ([`half_lanes8`], rows whose length is a multiple of eight).
#[derive(Clone, Copy)]
enum Width {
    Ymm,
    Zmm,
    Lanes8,
    Lanes8Pairs,
}

/// One tile of `R` rows × `T` tokens in the width given.
///
/// # Safety
/// As for [`tile512`] (AVX-512 only for `Width::Zmm`).
#[inline(always)]
unsafe fn tile<H: Half, X: Acts, const R: usize, const T: usize>(
    width: Width,
    w: [*const u8; R],
    x: [X; T],
    n: usize,
    out: &mut [[f32; T]; R],
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        match width {
            Width::Ymm => tile256::<H, X, R, T>(w, x, n, out),
            Width::Zmm => tile512::<H, X, R, T>(w, x, n, out),
            Width::Lanes8 => half_lanes8::tile::<H, X, R, T>(w, x, n, out),
            Width::Lanes8Pairs => half_lanes8::tile_pairs::<H, X, R, T>(w, x, n, out),
        }
    }
}

/// F16 or BF16 · the same format, in the order above (the single-row kernel of both tables).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot<H: Half>(w: &[u8], a: &[u8]) -> f32 {
    let n = w.len().min(a.len()) / 2;
    let x = HalfRow::<H>(a.as_ptr(), std::marker::PhantomData);
    let mut out = [[0f32; 1]; 1];
    let width = if n.is_multiple_of(LANES) {
        Width::Lanes8
    } else {
        Width::Ymm
    };
    // SAFETY: both rows hold `n` elements; the caller guarantees the CPU features.
    unsafe { tile::<H, _, 1, 1>(width, [w.as_ptr()], [x], n, &mut out) };
    out[0][0]
}

/// Tile-kernel entry (see `quant::gemm::gemm` for the contract), 256-bit. tinyBLAS's order:
/// tiles of six rows × two tokens (twelve accumulators, two activations and a weight vector:
/// fifteen of sixteen registers). tinyBLAS's own 4 × 3 needs all sixteen, and the compiler then
/// kept an accumulator in memory, a store and a load in its chain every step: 100 GFLOP/s on
/// two Zen 4 cores for gemma3-base's products, against 200 for 6 × 2 and 192 for 3 × 3.
/// `ggml_vec_dot_f16`'s order: one row × three tokens (four accumulators per product; two rows
/// would spill).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm_avx2<H: Half>(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    // SAFETY: the caller guarantees the CPU features.
    unsafe {
        if acts.n_blocks.is_multiple_of(LANES) {
            gemm_shape::<H, 6, 2>(Width::Lanes8, w, rows, acts, pairs, out, t_stride, r_stride)
        } else if acts.n_blocks > K_CHUNK {
            gemm_chunked::<H, 3>(w, rows, acts, pairs, out, t_stride, r_stride)
        } else {
            gemm_shape::<H, 1, 3>(Width::Ymm, w, rows, acts, pairs, out, t_stride, r_stride)
        }
    }
}

/// Elements of one k-chunk of [`gemm_chunked`]: three tokens' activations over a chunk (12 KiB
/// of f32) stay in L1 while a block of weight rows passes them, where whole rows of a wide
/// product (three tokens × 3072 elements, 36 KiB) would be streamed from L2 once per weight row.
const K_CHUNK: usize = 1024;

/// [`gemm_shape`]'s AVX2 `1 × T` tiles for rows longer than [`K_CHUNK`]: for each row block and
/// token group, the rows' accumulators wait in memory between k-chunks. Each accumulator adds
/// the same products in the same order as in [`tile256`], so the bits are the same.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn gemm_chunked<H: Half, const T: usize>(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    const { assert!(T == 3, "token remainders are dispatched up to two") };
    let n = acts.n_blocks;
    let (t_begin, t_end) = (2 * pairs.start, (2 * pairs.end).min(acts.n_tokens));
    assert!(w.len() >= rows * 2 * n && acts.half.len() >= t_end * n);
    let block = (ROW_BLOCK_BYTES / (2 * n).max(1)).max(1);
    let mut put = |r: usize, t: usize, v: f32| out[(t - t_begin) * t_stride + r * r_stride] = v;
    let mut b0 = 0;
    while b0 < rows {
        let b1 = (b0 + block).min(rows);
        let mut t0 = t_begin;
        while t0 < t_end {
            let nt = (t_end - t0).min(T);
            let g = &mut put;
            // SAFETY: rows `b0..b1` and tokens `t0..t0 + nt` exist (asserted above); the
            // caller guarantees the CPU features.
            unsafe {
                match nt {
                    1 => chunked_group::<H, 1>(w, n, b0..b1, acts, t0, g),
                    2 => chunked_group::<H, 2>(w, n, b0..b1, acts, t0, g),
                    _ => chunked_group::<H, T>(w, n, b0..b1, acts, t0, g),
                }
            }
            t0 += nt;
        }
        b0 = b1;
    }
}

/// Tokens `t0..t0 + T` against weight rows `rows`, k-chunk by k-chunk (see [`gemm_chunked`]).
///
/// # Safety
/// The rows and tokens exist; the CPU must support AVX2, FMA and F16C.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn chunked_group<H: Half, const T: usize>(
    w: &[u8],
    n: usize,
    rows: Range<usize>,
    acts: &PackedActs,
    t0: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    let row = |r: usize| w[2 * n * r..].as_ptr();
    let x: [*const f32; T] = std::array::from_fn(|t| acts.half[n * (t0 + t)..].as_ptr());
    let main = n / 32 * 32;
    let mut state = vec![[[_mm256_setzero_ps(); 4]; T]; rows.len()];
    let mut c0 = 0;
    while c0 < main {
        let c1 = (c0 + K_CHUNK).min(main);
        for (s, r) in state.iter_mut().zip(rows.clone()) {
            let wr = row(r);
            let mut acc = *s;
            let mut i = c0;
            // SAFETY: offsets stay below `main` elements of the row and the tokens.
            unsafe {
                while i < c1 {
                    for k in 0..4 {
                        let wv = H::widen8(wr.add(2 * (i + 8 * k)));
                        for t in 0..T {
                            let xv = x[t].load8(i + 8 * k);
                            acc[t][k] = _mm256_fmadd_ps(wv, xv, acc[t][k]);
                        }
                    }
                    i += 32;
                }
            }
            *s = acc;
        }
        c0 = c1;
    }
    for (s, r) in state.iter().zip(rows) {
        for t in 0..T {
            // SAFETY: the row and token hold `n` elements.
            let v = unsafe { finish::<H, _>(s[t], row(r), x[t], main, n) };
            put(r, t0 + t, v);
        }
    }
}

/// Tile-kernel entry, 512-bit. tinyBLAS's order: tiles of six rows × six tokens, two rows per
/// register (eighteen accumulators; 4 × 6 and 8 × 6 were no faster on the gemma3-base vision
/// tower); where the CPU splits 512-bit operations ([`crate::cpu::splits_512`], Zen 4), six
/// rows × four tokens in 256-bit registers (twenty-four of thirty-two: 213 GFLOP/s on two Zen 4
/// cores for gemma3-base's products, against 181 for the 512-bit tiles and 201 for the AVX2
/// entry's 6 × 2). `ggml_vec_dot_f16`'s order: three rows × four tokens (twenty-four accumulator
/// registers of thirty-two; each activation load serves three rows). Measured on Sapphire
/// Rapids, one thread, 1024 × 2048 F16 weights × 64 tokens: 2.0 ms, against 2.4 for 2 × 4,
/// 2.6 for 4 × 2 and 2.4 for 2 × 6 (which spills).
///
/// # Safety
/// The CPU must support AVX-512 F, VL and DQ, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn gemm_avx512<H: Half>(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    let split = crate::cpu::splits_512();
    // SAFETY: forwarded from the caller.
    unsafe { gemm_avx512_tiles::<H>(split, w, rows, acts, pairs, out, t_stride, r_stride) }
}

/// [`gemm_avx512`] with the form of its tinyBLAS-order tiles chosen: 256-bit (`split`) or
/// 512-bit pairs. Same bits either way.
///
/// # Safety
/// As for [`gemm_avx512`].
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn gemm_avx512_tiles<H: Half>(
    split: bool,
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    // SAFETY: the caller guarantees the CPU features.
    unsafe {
        match (acts.n_blocks.is_multiple_of(LANES), split) {
            (true, true) => {
                gemm_shape::<H, 6, 4>(Width::Lanes8, w, rows, acts, pairs, out, t_stride, r_stride)
            }
            (true, false) => gemm_shape::<H, 6, 6>(
                Width::Lanes8Pairs,
                w,
                rows,
                acts,
                pairs,
                out,
                t_stride,
                r_stride,
            ),
            (false, _) => {
                gemm_shape::<H, 3, 4>(Width::Zmm, w, rows, acts, pairs, out, t_stride, r_stride)
            }
        }
    }
}

/// Weight bytes of one row block: the rows a group of tokens meets one after another, kept in
/// L2 while every token group of the call passes them (each token group's activations stay in
/// L1 meanwhile), so that activations are not streamed from L2 once per weight row.
const ROW_BLOCK_BYTES: usize = 192 * 1024;

/// The tile loop: weight rows in blocks of about [`ROW_BLOCK_BYTES`]; in each block tokens `T`
/// at a time (the rest in one narrower tile), and for each token group the block's rows `R` at
/// a time (the rest one by one). The order of the tiles changes no product's float order.
///
/// # Safety
/// The CPU features of `width`'s kernels.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn gemm_shape<H: Half, const R: usize, const T: usize>(
    width: Width,
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    const { assert!(T <= 6, "token remainders are dispatched up to five") };
    let n = acts.n_blocks;
    let (t_begin, t_end) = (2 * pairs.start, (2 * pairs.end).min(acts.n_tokens));
    assert!(w.len() >= rows * 2 * n && acts.half.len() >= t_end * n);
    let row = |r: usize| w[2 * n * r..].as_ptr();
    let tok = |t: usize| acts.half[n * t..].as_ptr();
    let block = (ROW_BLOCK_BYTES / (2 * n).max(1))
        .next_multiple_of(R)
        .max(R);
    let mut b0 = 0;
    while b0 < rows {
        let b1 = (b0 + block).min(rows);
        let mut t0 = t_begin;
        while t0 < t_end {
            let nt = (t_end - t0).min(T);
            let mut r0 = b0;
            while r0 < b1 {
                let nr = if b1 - r0 >= R { R } else { 1 };
                let mut put = |r: usize, t: usize, v: f32| {
                    out[(t0 + t - t_begin) * t_stride + (r0 + r) * r_stride] = v;
                };
                // SAFETY: rows `r0..r0 + nr` and tokens `t0..t0 + nt` exist (asserted above);
                // the caller guarantees the CPU features.
                unsafe {
                    if nr == R {
                        let w_rows = std::array::from_fn(|r| row(r0 + r));
                        let p = &mut put;
                        match nt {
                            1 => tile_put::<H, R, 1>(width, w_rows, t0, &tok, n, p),
                            2 => tile_put::<H, R, 2>(width, w_rows, t0, &tok, n, p),
                            3 => tile_put::<H, R, 3>(width, w_rows, t0, &tok, n, p),
                            4 if T > 4 => tile_put::<H, R, 4>(width, w_rows, t0, &tok, n, p),
                            5 if T > 5 => tile_put::<H, R, 5>(width, w_rows, t0, &tok, n, p),
                            _ => tile_put::<H, R, T>(width, w_rows, t0, &tok, n, p),
                        }
                    } else {
                        for t in 0..nt {
                            tile_put::<H, 1, 1>(
                                width,
                                [row(r0)],
                                t0 + t,
                                &tok,
                                n,
                                &mut |_, _, v| put(0, t, v),
                            );
                        }
                    }
                }
                r0 += nr;
            }
            t0 += nt;
        }
        b0 = b1;
    }
}

/// One tile of `R` rows × `T` tokens from token `t0` on, handed to `put(row, token, value)`.
///
/// # Safety
/// As for [`tile`]; `T` is at most the `T` of the kernel's shape.
#[inline(always)]
unsafe fn tile_put<H: Half, const R: usize, const T: usize>(
    width: Width,
    w: [*const u8; R],
    t0: usize,
    tok: &impl Fn(usize) -> *const f32,
    n: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    let mut o = [[0f32; T]; R];
    // SAFETY: forwarded from the caller.
    unsafe { tile::<H, _, R, T>(width, w, std::array::from_fn(|t| tok(t0 + t)), n, &mut o) };
    for (r, o) in o.iter().enumerate() {
        for (t, &v) in o.iter().enumerate() {
            put(r, t, v);
        }
    }
}

/// Matrix-vector entry (see `quant::gemm::matvec`), 256-bit: four rows per step in tinyBLAS's
/// order, three in `ggml_vec_dot_f16`'s.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn matvec_avx2<H: Half>(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    // SAFETY: the caller guarantees the CPU features.
    unsafe {
        if acts.n_blocks.is_multiple_of(LANES) {
            matvec_rows::<H, 4>(Width::Lanes8, w, acts, out)
        } else {
            matvec_rows::<H, 3>(Width::Ymm, w, acts, out)
        }
    }
}

/// Matrix-vector entry, 512-bit: eight rows per step in tinyBLAS's order (two per register),
/// four in `ggml_vec_dot_f16`'s.
///
/// # Safety
/// The CPU must support AVX-512 F, VL and DQ, AVX2, FMA and F16C.
#[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma,f16c")]
pub(super) unsafe fn matvec_avx512<H: Half>(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    // SAFETY: the caller guarantees the CPU features.
    unsafe {
        if acts.n_blocks.is_multiple_of(LANES) {
            matvec_rows::<H, 8>(Width::Lanes8Pairs, w, acts, out)
        } else {
            matvec_rows::<H, 4>(Width::Zmm, w, acts, out)
        }
    }
}

/// `R` weight rows per step against the one token, the rest one at a time.
///
/// # Safety
/// The CPU features of `width`'s kernels.
#[inline(always)]
unsafe fn matvec_rows<H: Half, const R: usize>(
    width: Width,
    w: &[u8],
    acts: &PackedActs,
    out: &mut [f32],
) {
    let n = acts.n_blocks;
    assert!(w.len() >= out.len() * 2 * n && acts.half.len() >= n);
    let x = [acts.half.as_ptr()];
    let row = |r: usize| w[2 * n * r..].as_ptr();
    let full = out.len() / R * R;
    let (head, tail) = out.split_at_mut(full);
    for (i, o) in head.chunks_exact_mut(R).enumerate() {
        let mut v = [[0f32; 1]; R];
        // SAFETY: rows `R * i..R * i + R` exist (asserted above); the caller guarantees the
        // CPU features.
        unsafe { tile::<H, _, R, 1>(width, std::array::from_fn(|r| row(R * i + r)), x, n, &mut v) };
        o.iter_mut().zip(v).for_each(|(o, v)| *o = v[0]);
    }
    for (i, o) in tail.iter_mut().enumerate() {
        let mut v = [[0f32; 1]; 1];
        // SAFETY: as above.
        unsafe { tile::<H, _, 1, 1>(width, [row(full + i)], x, n, &mut v) };
        *o = v[0][0];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::gemm::pack_acts;
    use crate::quant::{quantize_row, GgmlType};

    /// The 256-bit tiles Zen 4 takes and the 512-bit pair tiles give the same bits, checked on
    /// every AVX-512 CPU whichever of the two it runs (rows and tokens off both tile shapes).
    #[test]
    fn both_avx512_tile_forms_give_the_same_bits() {
        if !crate::cpu::supports(crate::cpu::Isa::Avx512) {
            return;
        }
        let (n, rows, tokens) = (776, 13, 11);
        let values = |len: usize, seed: usize| -> Vec<u8> {
            let x: Vec<f32> = (0..len)
                .map(|i| ((i * 7919 + seed) % 1013) as f32 / 506.5 - 1.0)
                .collect();
            let mut b = vec![0u8; 2 * len];
            for (src, dst) in x.chunks(n).zip(b.chunks_mut(2 * n)) {
                quantize_row(GgmlType::F16, src, dst);
            }
            b
        };
        let (w, a) = (values(rows * n, 1), values(tokens * n, 2));
        let acts = pack_acts(GgmlType::F16, n, &a, tokens);
        let pairs = 0..acts.n_pairs();
        let mut outs = [vec![f32::NAN; rows * tokens], vec![f32::NAN; rows * tokens]];
        for (split, out) in [false, true].into_iter().zip(&mut outs) {
            // SAFETY: the CPU supports AVX-512 (checked above); the lengths are whole rows.
            unsafe {
                gemm_avx512_tiles::<F16>(split, &w, rows, &acts, pairs.clone(), out, rows, 1)
            };
        }
        let bits = |o: &[f32]| o.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&outs[0]), bits(&outs[1]));
        assert!(outs[0].iter().all(|v| v.is_finite()));
    }
}
