//! F16 and BF16 weights on NEON: the single-row dot product, tile kernels for batches and
//! matrix-vector kernels for one token.
//!
//! The float orders are the x86 ones (`x86/half.rs`), each 8-lane accumulator held here as two
//! 4-lane registers. Rows whose length is a multiple of eight: tinyBLAS's, one accumulator per
//! product, its eight lanes summed in x86's `hsum_f32_8` order. Other rows: per 32 elements
//! four accumulators, then 8-element steps into the first, `(a0 + a1) + (a2 + a3)`, the same
//! sum of lanes, and the last `n % 8` products added one by one. FMA rounds once on both
//! architectures, so every variant of both gives the same bits.

use std::arch::aarch64::*;
use std::arch::asm;
use std::ops::Range;

use crate::quant::gemm::PackedActs;

/// Eight lanes as two NEON registers (lanes 0-3, 4-7).
type F8 = [float32x4_t; 2];

/// How a 16-bit weight format widens to f32.
pub(super) trait Half {
    /// Eight elements at `p` (16 bytes) as f32.
    ///
    /// # Safety
    /// 16 readable bytes at `p`.
    unsafe fn widen8(p: *const u8) -> F8;
    /// One element.
    fn widen1(b: [u8; 2]) -> f32;
}

/// IEEE half weights.
pub(super) struct F16;
/// bfloat16 weights.
pub(super) struct Bf16;

impl Half for F16 {
    #[inline(always)]
    unsafe fn widen8(p: *const u8) -> F8 {
        // SAFETY: the caller guarantees 16 readable bytes; `fcvtl`/`fcvtl2` (half to single,
        // exact) belong to baseline Advanced SIMD and touch only the named registers.
        unsafe {
            let h = vld1q_u16(p.cast());
            let (lo, hi): (float32x4_t, float32x4_t);
            asm!(
                "fcvtl {lo:v}.4s, {h:v}.4h",
                "fcvtl2 {hi:v}.4s, {h:v}.8h",
                h = in(vreg) h,
                lo = out(vreg) lo,
                hi = out(vreg) hi,
                options(pure, nomem, nostack, preserves_flags),
            );
            [lo, hi]
        }
    }
    #[inline(always)]
    fn widen1(b: [u8; 2]) -> f32 {
        crate::quant::f16_to_f32(b)
    }
}

impl Half for Bf16 {
    #[inline(always)]
    unsafe fn widen8(p: *const u8) -> F8 {
        // SAFETY: the caller guarantees 16 readable bytes.
        unsafe {
            let h = vld1q_u16(p.cast());
            [
                vreinterpretq_f32_u32(vshll_n_u16::<16>(vget_low_u16(h))),
                vreinterpretq_f32_u32(vshll_high_n_u16::<16>(h)),
            ]
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
    /// Elements `i..i + 8` exist.
    unsafe fn load8(self, i: usize) -> F8;
    /// Element `i`.
    ///
    /// # Safety
    /// Element `i` exists.
    unsafe fn get(self, i: usize) -> f32;
}

impl Acts for *const f32 {
    #[inline(always)]
    unsafe fn load8(self, i: usize) -> F8 {
        // SAFETY: the caller guarantees the elements.
        unsafe { [vld1q_f32(self.add(i)), vld1q_f32(self.add(i + 4))] }
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
    unsafe fn load8(self, i: usize) -> F8 {
        // SAFETY: the caller guarantees the elements.
        unsafe { H::widen8(self.0.add(2 * i)) }
    }
    #[inline(always)]
    unsafe fn get(self, i: usize) -> f32 {
        // SAFETY: the caller guarantees the element.
        unsafe { H::widen1([*self.0.add(2 * i), *self.0.add(2 * i + 1)]) }
    }
}

/// `acc + w · x`, lane by lane, fused.
#[inline(always)]
unsafe fn fma8(acc: F8, w: F8, x: F8) -> F8 {
    // SAFETY: baseline Advanced SIMD.
    unsafe { [vfmaq_f32(acc[0], w[0], x[0]), vfmaq_f32(acc[1], w[1], x[1])] }
}

/// `a + b`, lane by lane.
#[inline(always)]
unsafe fn add8(a: F8, b: F8) -> F8 {
    // SAFETY: baseline Advanced SIMD.
    unsafe { [vaddq_f32(a[0], b[0]), vaddq_f32(a[1], b[1])] }
}

/// The eight lanes summed in x86's `hsum_f32_8` order:
/// `((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))`.
#[inline(always)]
unsafe fn hsum8(v: F8) -> f32 {
    // SAFETY: baseline Advanced SIMD.
    unsafe {
        let r = vaddq_f32(v[0], v[1]);
        let a = vgetq_lane_f32::<0>(r) + vgetq_lane_f32::<2>(r);
        let b = vgetq_lane_f32::<1>(r) + vgetq_lane_f32::<3>(r);
        a + b
    }
}

/// `out[r][t]` = the product of weight row `w[r]` and activation row `x[t]`, `n` elements each.
///
/// # Safety
/// Every row holds `n` elements (2 bytes each for weights).
// Indexing reads better than iterators over three array dimensions at once.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn tile<H: Half, X: Acts, const R: usize, const T: usize>(
    w: [*const u8; R],
    x: [X; T],
    n: usize,
    out: &mut [[f32; T]; R],
) {
    if n.is_multiple_of(8) {
        // SAFETY: forwarded from the caller.
        return unsafe { tile_lanes8::<H, X, R, T>(w, x, n, out) };
    }
    // SAFETY (everything below): offsets stay below `n` elements, which the caller guarantees.
    unsafe {
        let zero = [vdupq_n_f32(0.0); 2];
        let mut acc = [[[zero; 4]; T]; R];
        let mut i = 0;
        while i + 32 <= n {
            for k in 0..4 {
                for r in 0..R {
                    let wv = H::widen8(w[r].add(2 * (i + 8 * k)));
                    for t in 0..T {
                        acc[r][t][k] = fma8(acc[r][t][k], wv, x[t].load8(i + 8 * k));
                    }
                }
            }
            i += 32;
        }
        for r in 0..R {
            for t in 0..T {
                let mut a = acc[r][t];
                let mut j = i;
                while j + 8 <= n {
                    a[0] = fma8(a[0], H::widen8(w[r].add(2 * j)), x[t].load8(j));
                    j += 8;
                }
                let mut s = hsum8(add8(add8(a[0], a[1]), add8(a[2], a[3])));
                while j < n {
                    s += H::widen1([*w[r].add(2 * j), *w[r].add(2 * j + 1)]) * x[t].get(j);
                    j += 1;
                }
                out[r][t] = s;
            }
        }
    }
}

/// [`tile`] for rows whose length `n` is a multiple of eight, in tinyBLAS's order: one 8-lane
/// accumulator per product.
///
/// # Safety
/// As for [`tile`].
#[allow(clippy::needless_range_loop)]
#[inline(always)]
unsafe fn tile_lanes8<H: Half, X: Acts, const R: usize, const T: usize>(
    w: [*const u8; R],
    x: [X; T],
    n: usize,
    out: &mut [[f32; T]; R],
) {
    // SAFETY (everything below): offsets stay below `n` elements, which the caller guarantees.
    unsafe {
        let mut acc = [[[vdupq_n_f32(0.0); 2]; T]; R];
        let mut i = 0;
        while i < n {
            for r in 0..R {
                let wv = H::widen8(w[r].add(2 * i));
                for t in 0..T {
                    acc[r][t] = fma8(acc[r][t], wv, x[t].load8(i));
                }
            }
            i += 8;
        }
        for r in 0..R {
            for t in 0..T {
                out[r][t] = hsum8(acc[r][t]);
            }
        }
    }
}

/// F16 or BF16 · the same format (the single-row kernel).
///
/// # Safety
/// NEON (every aarch64 CPU).
#[target_feature(enable = "neon")]
pub(super) unsafe fn dot<H: Half>(w: &[u8], a: &[u8]) -> f32 {
    let n = w.len().min(a.len()) / 2;
    let x = HalfRow::<H>(a.as_ptr(), std::marker::PhantomData);
    let mut out = [[0f32; 1]; 1];
    // SAFETY: both rows hold `n` elements.
    unsafe { tile::<H, _, 1, 1>([w.as_ptr()], [x], n, &mut out) };
    out[0][0]
}

/// One tile of `R` rows × `T` tokens from token `t0` on, handed to `put(row, token, value)`.
///
/// # Safety
/// As for [`tile`].
#[inline(always)]
unsafe fn tile_put<H: Half, const R: usize, const T: usize>(
    w: [*const u8; R],
    t0: usize,
    tok: &impl Fn(usize) -> *const f32,
    n: usize,
    put: &mut impl FnMut(usize, usize, f32),
) {
    let mut o = [[0f32; T]; R];
    // SAFETY: forwarded from the caller.
    unsafe { tile::<H, _, R, T>(w, std::array::from_fn(|t| tok(t0 + t)), n, &mut o) };
    for (r, o) in o.iter().enumerate() {
        for (t, &v) in o.iter().enumerate() {
            put(r, t, v);
        }
    }
}

/// Tile-kernel entry (see `quant::gemm::gemm` for the contract): one row × three tokens (24 of
/// the 32 registers hold accumulators). Not timed: no ARM hardware was at hand.
///
/// # Safety
/// NEON (every aarch64 CPU).
#[target_feature(enable = "neon")]
pub(super) unsafe fn gemm<H: Half>(
    w: &[u8],
    rows: usize,
    acts: &PackedActs,
    pairs: Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
) {
    let n = acts.n_blocks;
    let (t_begin, t_end) = (2 * pairs.start, (2 * pairs.end).min(acts.n_tokens));
    assert!(w.len() >= rows * 2 * n && acts.half.len() >= t_end * n);
    let tok = |t: usize| acts.half[n * t..].as_ptr();
    for r in 0..rows {
        let wr = [w[2 * n * r..].as_ptr()];
        let mut t0 = t_begin;
        while t0 < t_end {
            let nt = (t_end - t0).min(3);
            let mut put = |_: usize, t: usize, v: f32| {
                out[(t0 + t - t_begin) * t_stride + r * r_stride] = v;
            };
            // SAFETY: row `r` and tokens `t0..t0 + nt` exist (asserted above).
            unsafe {
                match nt {
                    1 => tile_put::<H, 1, 1>(wr, t0, &tok, n, &mut put),
                    2 => tile_put::<H, 1, 2>(wr, t0, &tok, n, &mut put),
                    _ => tile_put::<H, 1, 3>(wr, t0, &tok, n, &mut put),
                }
            }
            t0 += nt;
        }
    }
}

/// Matrix-vector entry (see `quant::gemm::matvec`): three rows per step, the rest one at a time.
///
/// # Safety
/// NEON (every aarch64 CPU).
#[target_feature(enable = "neon")]
pub(super) unsafe fn matvec<H: Half>(w: &[u8], acts: &PackedActs, out: &mut [f32]) {
    const R: usize = 3;
    let n = acts.n_blocks;
    assert!(w.len() >= out.len() * 2 * n && acts.half.len() >= n);
    let x = [acts.half.as_ptr()];
    let row = |r: usize| w[2 * n * r..].as_ptr();
    let full = out.len() / R * R;
    let (head, tail) = out.split_at_mut(full);
    for (i, o) in head.chunks_exact_mut(R).enumerate() {
        let mut v = [[0f32; 1]; R];
        // SAFETY: rows `R * i..R * i + R` exist (asserted above).
        unsafe { tile::<H, _, R, 1>(std::array::from_fn(|r| row(R * i + r)), x, n, &mut v) };
        o.iter_mut().zip(v).for_each(|(o, v)| *o = v[0]);
    }
    for (i, o) in tail.iter_mut().enumerate() {
        let mut v = [[0f32; 1]; 1];
        // SAFETY: as above.
        unsafe { tile::<H, _, 1, 1>([row(full + i)], x, n, &mut v) };
        *o = v[0][0];
    }
}
