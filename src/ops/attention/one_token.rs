//! The one-token attention kernel's structure, written once for every SIMD width ([`Lanes`]):
//! ggml's f16 pipeline (the query rounded to f16, the four-accumulator q·k dot with its fixed
//! reduction, the online softmax, the value accumulator kept in f16 and rounded after every
//! fused multiply-add), for the query heads of one call interleaved position by position.
//!
//! The query is rounded to f16 and widened back once, and with several heads each key and
//! value row is widened once per position for all of them (one head reads the f16 rows
//! directly): widening is exact, so every product is the one ggml forms from the f16 values,
//! and the heads' dependency chains overlap.

use super::{f16_bits as bits, softmax_step, Rows, Scores};

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
    unsafe fn store(d: &mut [f32], v: Self);
    unsafe fn splat(x: f32) -> Self;
    unsafe fn mul(a: Self, b: Self) -> Self;
    /// `a * b + c`, fused.
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
    /// ggml's AVX-512 f16 dot of `q` (widened f16 values) and the key row `k`, in its float
    /// order.
    unsafe fn dot<K: KeyRow + ?Sized>(q: &[f32], k: &K) -> f32;
}

/// A key row as the dot reads it: widened already, or f16.
pub(super) trait KeyRow {
    /// The `L::N` values from `at` as floats.
    unsafe fn vector<L: Lanes>(&self, at: usize) -> L;
}

impl KeyRow for [f32] {
    #[inline(always)]
    unsafe fn vector<L: Lanes>(&self, at: usize) -> L {
        // SAFETY: the caller has `L`'s features.
        unsafe { L::load(&self[at..]) }
    }
}

impl KeyRow for [u16] {
    #[inline(always)]
    unsafe fn vector<L: Lanes>(&self, at: usize) -> L {
        // SAFETY: the caller has `L`'s features.
        unsafe { L::widen(&self[at..]) }
    }
}

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
    let mut q16 = vec![0u16; q.len()];
    for (src, dst) in q.chunks_exact(w).zip(q16.chunks_exact_mut(w)) {
        L::round_store(dst, L::load(src));
    }
    let mut qr = lines(q.len());
    widen::<L>(&q16, flat_mut(&mut qr));
    let qr = flat(&qr);
    let (mut kl, mut vl) = (lines(hd), lines(hd));
    let (k, v) = (flat_mut(&mut kl), flat_mut(&mut vl));
    let mut acc_lines = lines(q.len().div_ceil(32) * 16);
    let acc = &mut flat_bits_mut(&mut acc_lines)[..q.len()];
    let mut state = vec![(f32::NEG_INFINITY, 0f32); n];
    let mut weight = vec![0f32; n];
    for p in rows.first..=rows.last {
        let k_row = bits(&rows.keys[(rows.row)(rows.keys, p)]);
        if n > 1 {
            widen::<L>(k_row, k);
        }
        for (h, ((max, sum), wt)) in state.iter_mut().zip(&mut weight).enumerate() {
            let qh = &qr[h * hd..][..hd];
            let s = scores.apply(if n > 1 {
                L::dot(qh, k)
            } else {
                L::dot(qh, k_row)
            });
            let (ms, vs) = softmax_step(s, max, sum);
            if ms != 1.0 {
                let m = L::splat(ms);
                for a in acc[h * hd..][..hd].chunks_exact_mut(w) {
                    L::round_store(a, L::mul(L::widen(a), m));
                }
            }
            *wt = vs;
        }
        let v_row = bits(&rows.values[(rows.row)(rows.values, p)]);
        if n > 1 {
            widen::<L>(v_row, v);
            for (acc, &vs) in acc.chunks_exact_mut(hd).zip(&weight) {
                let wt = L::splat(vs);
                for (a, x) in acc.chunks_exact_mut(w).zip(v.chunks_exact(w)) {
                    L::round_store(a, L::fma(L::load(x), wt, L::widen(a)));
                }
            }
        } else {
            let wt = L::splat(weight[0]);
            for (a, x) in acc.chunks_exact_mut(w).zip(v_row.chunks_exact(w)) {
                L::round_store(a, L::fma(L::widen(x), wt, L::widen(a)));
            }
        }
    }
    for ((out, acc), (_, sum)) in out
        .chunks_exact_mut(hd)
        .zip(acc.chunks_exact(hd))
        .zip(&state)
    {
        let inv = L::splat(if *sum == 0.0 { 0.0 } else { 1.0 / sum });
        for (o, a) in out.chunks_exact_mut(w).zip(acc.chunks_exact(w)) {
            L::store(o, L::mul(L::widen(a), inv));
        }
    }
}

/// Widens the f16 `src` into `dst` (the same length).
#[inline(always)]
unsafe fn widen<L: Lanes>(src: &[u16], dst: &mut [f32]) {
    for (s, d) in src.chunks_exact(L::N).zip(dst.chunks_exact_mut(L::N)) {
        L::store(d, L::widen(s));
    }
}

/// Sixteen floats on a cache line of their own: the widened rows and the accumulator live in
/// these, so that a vector store and the loads that read it back never straddle two lines (a
/// straddling store is not forwarded to the load, which then waits for it to retire).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// Zeroed lines for `n` floats (`n` a multiple of 16).
fn lines(n: usize) -> Vec<Line> {
    vec![Line([0.0; 16]); n / 16]
}

fn flat(l: &[Line]) -> &[f32] {
    // SAFETY: `Line` is `repr(C)` around `[f32; 16]` with no padding (64 bytes, align 64), so
    // the lines are contiguous floats.
    unsafe { std::slice::from_raw_parts(l.as_ptr().cast(), l.len() * 16) }
}

fn flat_mut(l: &mut [Line]) -> &mut [f32] {
    // SAFETY: as in `flat`; the borrow is unique.
    unsafe { std::slice::from_raw_parts_mut(l.as_mut_ptr().cast(), l.len() * 16) }
}

/// The lines as f16 bits (twice as many values as floats).
fn flat_bits_mut(l: &mut [Line]) -> &mut [u16] {
    // SAFETY: as in `flat`; any bit pattern is a valid u16, and u16's alignment divides 64.
    unsafe { std::slice::from_raw_parts_mut(l.as_mut_ptr().cast(), l.len() * 32) }
}
