//! The one-token attention kernel's structure, written once for every SIMD width ([`Lanes`]):
//! ggml's f16 pipeline (the query rounded to f16, the four-accumulator q·k dot with its fixed
//! reduction, the online softmax, the value accumulator kept in f16 and rounded after every
//! fused multiply-add), for the query heads of one call, by blocks of positions.
//!
//! The query is rounded to f16 and widened back once, and each block's key and value rows are
//! widened once for all the heads: widening is exact, so every product is the one ggml forms
//! from the f16 values. Per block, the dots come first (independent, so they overlap), then
//! each head's softmax steps in order, then the value accumulator runs through the block in
//! registers; the order of the floating-point steps per head is ggml's.

use super::{f16_bits as bits, softmax_step_with, Rows, Scores};
use crate::ops::mathf;

/// The vector operations of one SIMD width. Every method needs the CPU features of its
/// implementation and slices of at least `N` elements.
pub(super) trait Lanes: Copy {
    /// Floats per vector.
    const N: usize;
    /// `N` f16 widened to f32.
    unsafe fn widen(s: &[u16]) -> Self;
    unsafe fn load(s: &[f32]) -> Self;
    /// Stores the lanes rounded to f16 (nearest even).
    unsafe fn round_store(d: &mut [u16], v: Self);
    /// The lanes rounded to f16 (nearest even) and widened back.
    unsafe fn round(v: Self) -> Self;
    unsafe fn store(d: &mut [f32], v: Self);
    unsafe fn splat(x: f32) -> Self;
    unsafe fn mul(a: Self, b: Self) -> Self;
    unsafe fn sub(a: Self, b: Self) -> Self;
    /// `expf` of every lane with [`crate::ops::expf::expf_ggml`]'s bits.
    unsafe fn exp(x: Self) -> Self;
    /// `a * b + c`, fused.
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
    /// ggml's AVX-512 f16 dot of `q` (widened f16 values) and the key row `k`, in its float
    /// order.
    unsafe fn dot(q: &[f32], k: &[f32]) -> f32;
}

/// Positions taken together: their dots first, then their softmax steps, then their values.
const BLOCK: usize = 16;

/// Accumulator vectors one pass over a block keeps in registers.
const PASS: usize = 8;

/// The heads in `q` (`hd` values each) over `rows`, into `out`.
///
/// # Safety
/// The CPU must support `L`'s features; `hd` is a multiple of 64 and divides `q.len()`, which
/// `out.len()` equals.
#[inline(always)]
pub(super) unsafe fn attend<L: Lanes>(
    scores: Scores,
    q: &[f32],
    hd: usize,
    rows: &Rows,
    out: &mut [f32],
) {
    let (n, w) = (q.len() / hd, L::N);
    let qr = rounded_query::<L>(q);
    let qr = flat(&qr);
    let mut buffers = BlockLines::new(BLOCK, hd, q.len());
    let (kb, vb, acc) = buffers.split();
    let mut state = vec![(f32::NEG_INFINITY, 0f32); n];
    // Per block of positions, head-major: the scores, then each one's (accumulator factor,
    // value weight) from the online softmax.
    let mut score = vec![0f32; n * BLOCK];
    let mut factor = vec![(1f32, 0f32); n * BLOCK];
    let mut p0 = rows.first;
    while p0 <= rows.last {
        let len = (rows.last + 1 - p0).min(BLOCK);
        widen_block::<L>(rows, p0, len, hd, kb, vb);
        // The dots of a block depend neither on each other nor on the softmax: they overlap.
        for (h, qh) in qr.chunks_exact(hd).enumerate() {
            for (i, k) in kb.chunks_exact(hd).take(len).enumerate() {
                score[h * BLOCK + i] = scores.apply(L::dot(qh, k));
            }
        }
        for (h, st) in state.iter_mut().enumerate() {
            let (mut max, mut sum) = *st;
            for i in 0..len {
                factor[h * BLOCK + i] = softmax_step_with(
                    score[h * BLOCK + i],
                    &mut max,
                    &mut sum,
                    mathf::expf_inlined,
                );
            }
            *st = (max, sum);
        }
        // Each accumulator vector's chain runs through the block in registers, `PASS` chains
        // at a time (from one head or two).
        for (first, chunk) in acc.chunks_mut(PASS * w).enumerate() {
            let first = first * PASS * w;
            let values = &vb[..len * hd];
            if chunk.len() == PASS * w {
                pass::<L, PASS>(chunk, first, hd, values, &factor, len);
            } else {
                // AVX-512's last 64 floats when the heads hold an odd number of them.
                assert_eq!(chunk.len(), PASS / 2 * w, "attention: heads of {hd}");
                pass::<L, { PASS / 2 }>(chunk, first, hd, values, &factor, len);
            }
        }
        p0 += len;
    }
    for ((out, acc), (_, sum)) in out
        .chunks_exact_mut(hd)
        .zip(acc.chunks_exact(hd))
        .zip(&state)
    {
        let inv = L::splat(if *sum == 0.0 { 0.0 } else { 1.0 / sum });
        for (o, a) in out.chunks_exact_mut(w).zip(acc.chunks_exact(w)) {
            L::store(o, L::mul(L::load(a), inv));
        }
    }
}

/// One pass of the value accumulation over a block: `acc` holds the accumulator's floats from
/// `first` (in the heads' concatenation, `R` vectors), `values` the block's widened
/// rows, `factor` each head's (factor, weight) per position. In ggml's order per position: the
/// accumulator scaled when the running maximum moved, then the weighted value added, each
/// rounded to f16.
#[inline(always)]
unsafe fn pass<L: Lanes, const R: usize>(
    acc: &mut [f32],
    first: usize,
    hd: usize,
    values: &[f32],
    factor: &[(f32, f32)],
    len: usize,
) {
    let w = L::N;
    let mut reg = [L::splat(0.0); R];
    for (r, a) in reg.iter_mut().zip(acc.chunks_exact(w)) {
        *r = L::load(a);
    }
    // Each vector's head and column.
    let at: [(usize, usize); R] = std::array::from_fn(|r| {
        let x = first + r * w;
        (x / hd, x % hd)
    });
    for i in 0..len {
        let row = &values[i * hd..][..hd];
        for r in 0..R {
            let (h, col) = at[r];
            let (ms, vs) = factor[h * BLOCK + i];
            if ms != 1.0 {
                reg[r] = L::round(L::mul(reg[r], L::splat(ms)));
            }
            reg[r] = L::round(L::fma(L::load(&row[col..]), L::splat(vs), reg[r]));
        }
    }
    for (r, a) in reg.iter().zip(acc.chunks_exact_mut(w)) {
        L::store(a, *r);
    }
}

/// The query rounded to f16 (nearest even) and widened back, as ggml's kernels take it.
#[inline(always)]
pub(super) unsafe fn rounded_query<L: Lanes>(q: &[f32]) -> Vec<Line> {
    let mut q16 = vec![0u16; q.len()];
    for (src, dst) in q.chunks_exact(L::N).zip(q16.chunks_exact_mut(L::N)) {
        L::round_store(dst, L::load(src));
    }
    let mut qr = lines(q.len());
    widen::<L>(&q16, flat_mut(&mut qr));
    qr
}

/// Positions `p0..p0 + len` of `rows`, keys into `kb` and values into `vb`, widened (`hd`
/// floats per position).
#[inline(always)]
pub(super) unsafe fn widen_block<L: Lanes>(
    rows: &Rows,
    p0: usize,
    len: usize,
    hd: usize,
    kb: &mut [f32],
    vb: &mut [f32],
) {
    for i in 0..len {
        let k_row = bits(&rows.keys[(rows.row)(rows.keys, p0 + i)]);
        widen::<L>(k_row, &mut kb[i * hd..][..hd]);
        let v_row = bits(&rows.values[(rows.row)(rows.values, p0 + i)]);
        widen::<L>(v_row, &mut vb[i * hd..][..hd]);
    }
}

/// Widens the f16 `src` into `dst` (the same length).
#[inline(always)]
pub(super) unsafe fn widen<L: Lanes>(src: &[u16], dst: &mut [f32]) {
    for (s, d) in src.chunks_exact(L::N).zip(dst.chunks_exact_mut(L::N)) {
        L::store(d, L::widen(s));
    }
}

/// Sixteen floats on a cache line of their own: the widened rows and the accumulator live in
/// these, so that a vector store and the loads that read it back never straddle two lines (a
/// straddling store is not forwarded to the load, which then waits for it to retire).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Line([f32; 16]);

/// The scratch both kernels work in: a block's key and value rows widened to floats, and the
/// value accumulator of every head (f16 values held as floats), each on lines of its own.
pub(super) struct BlockLines {
    keys: Vec<Line>,
    values: Vec<Line>,
    acc: Vec<Line>,
}

impl BlockLines {
    /// Lines for `block` rows of `hd` floats each way and an accumulator of `q_len` floats.
    pub(super) fn new(block: usize, hd: usize, q_len: usize) -> Self {
        let (keys, values) = (lines(block * hd), lines(block * hd));
        let acc = lines(q_len);
        Self { keys, values, acc }
    }

    /// The keys, values and accumulator as floats.
    pub(super) fn split(&mut self) -> (&mut [f32], &mut [f32], &mut [f32]) {
        let keys = flat_mut(&mut self.keys);
        let values = flat_mut(&mut self.values);
        (keys, values, flat_mut(&mut self.acc))
    }
}

/// Zeroed lines for `n` floats (`n` a multiple of 16).
fn lines(n: usize) -> Vec<Line> {
    vec![Line([0.0; 16]); n / 16]
}

pub(super) fn flat(l: &[Line]) -> &[f32] {
    // SAFETY: `Line` is `repr(C)` around `[f32; 16]` with no padding (64 bytes, align 64), so
    // the lines are contiguous floats.
    unsafe { std::slice::from_raw_parts(l.as_ptr().cast(), l.len() * 16) }
}

fn flat_mut(l: &mut [Line]) -> &mut [f32] {
    // SAFETY: as in `flat`; the borrow is unique.
    unsafe { std::slice::from_raw_parts_mut(l.as_mut_ptr().cast(), l.len() * 16) }
}
