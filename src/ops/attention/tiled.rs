//! Attention for batches of [`MIN_TOKENS`] tokens or more, computed the way ggml's CPU flash
//! attention computes such batches (its tiled path): all in f32, the cache walked in tiles of 64
//! positions counted from position 0; per tile, each score a sequential chain of fused
//! multiply-adds over the head dimension, then scaled and masked; an online-softmax step with
//! ggml's vector `expf` whose tile sums are added in double precision; and the value accumulator
//! advanced by a sequential chain of fused multiply-adds over the tile's positions.
//!
//! Each (token, head) result depends only on that arithmetic, not on which rows are computed
//! together, so rows are grouped freely for speed: keys are converted and transposed once per
//! tile, and four rows at a time meet a whole tile in the micro-kernels.

use super::{f16_bits, reduce16, AttnShape};
use crate::cpu::Isa;
use crate::ops::mathf;
use crate::pool;
use half::f16;

/// Batches at least this long take the tiled path (ggml's threshold).
pub const MIN_TOKENS: usize = 64;
/// Cache positions per tile.
const TILE: usize = 64;
/// Rows (query token × head) per micro-kernel call.
const ROWS: usize = 4;
/// Query tokens per parallel task.
const TOKENS_PER_TASK: usize = 16;

/// One sequence's queries within a batch.
pub struct Queries<'a> {
    /// One row of `n_head * head_dim` per token.
    pub q: &'a [f32],
    /// Each token's position.
    pub pos: &'a [usize],
    /// Sliding window: a token sees the last `w` positions up to its own.
    pub window: Option<usize>,
    /// Every token also sees the positions after its own, up to the largest in `pos` (an
    /// image's rows read bidirectionally); false: causal.
    pub bidirectional: bool,
}

impl Queries<'_> {
    fn first(&self, pos: usize) -> usize {
        self.window.map_or(0, |w| (pos + 1).saturating_sub(w))
    }

    /// The last position the token at `pos` sees, given the largest position `max_pos`.
    fn last(&self, pos: usize, max_pos: usize) -> usize {
        if self.bidirectional {
            max_pos
        } else {
            pos
        }
    }
}

/// Attention of every query row over the sequence's cache; `out` has the shape of `queries.q`.
/// `keys`/`values` hold `n_head_kv * head_dim` f16 per position and must cover every position
/// up to the largest in `queries.pos`.
pub fn attend(shape: &AttnShape, queries: &Queries, keys: &[f16], values: &[f16], out: &mut [f32]) {
    let (hd, n_kv) = (shape.head_dim, shape.n_head_kv);
    let q_dim = shape.n_head * hd;
    let n = queries.pos.len();
    assert_eq!(queries.q.len(), n * q_dim, "attention: query rows");
    assert_eq!(out.len(), n * q_dim, "attention: output rows");
    if n == 0 {
        return;
    }
    let max_pos = *queries.pos.iter().max().unwrap();
    let min_first = queries.pos.iter().map(|&p| queries.first(p)).min().unwrap();
    let kv_dim = n_kv * hd;
    assert!(
        (max_pos + 1) * kv_dim <= keys.len().min(values.len()),
        "attention: position {max_pos} beyond the cache"
    );
    let keys_t = TransposedKeys::build(keys, n_kv, hd, min_first / TILE, max_pos);
    let values = Values {
        bits: f16_bits(values),
        kv_dim,
    };
    let kernels = Kernels::pick(crate::cpu::isa(), hd);
    pool::global().for_each_chunk(out, TOKENS_PER_TASK * q_dim, |task, out| {
        let t0 = task * TOKENS_PER_TASK;
        let tokens = t0..t0 + out.len() / q_dim;
        for kv_head in 0..n_kv {
            attend_rows(
                shape,
                queries,
                tokens.clone(),
                kv_head,
                &keys_t,
                &values,
                kernels,
                out,
            );
        }
    });
}

/// The cache's keys for tiles `first_tile..`, converted to f32 and transposed per tile and
/// head (`[head][tile][dim][64 positions]`), positions past the last zero-filled.
struct TransposedKeys {
    data: Vec<f32>,
    first_tile: usize,
    n_tiles: usize,
    hd: usize,
}

impl TransposedKeys {
    fn build(keys: &[f16], n_kv: usize, hd: usize, first_tile: usize, max_pos: usize) -> Self {
        let n_tiles = max_pos / TILE + 1 - first_tile;
        let mut data = vec![0f32; n_kv * n_tiles * hd * TILE];
        let kv_dim = n_kv * hd;
        pool::global().for_each_chunk(&mut data, hd * TILE, |i, tile| {
            let (head, t) = (i / n_tiles, first_tile + i % n_tiles);
            let mut row = vec![0f32; hd];
            for j in 0..TILE {
                let p = t * TILE + j;
                if p > max_pos {
                    break;
                }
                let start = p * kv_dim + head * hd;
                half::slice::HalfFloatSliceExt::convert_to_f32_slice(
                    &keys[start..start + hd],
                    &mut row,
                );
                for (d, v) in row.iter().enumerate() {
                    tile[d * TILE + j] = *v;
                }
            }
        });
        TransposedKeys {
            data,
            first_tile,
            n_tiles,
            hd,
        }
    }

    fn tile(&self, head: usize, tile: usize) -> &[f32] {
        let size = self.hd * TILE;
        let i = head * self.n_tiles + (tile - self.first_tile);
        &self.data[i * size..(i + 1) * size]
    }
}

/// The value cache as raw f16 bits.
struct Values<'a> {
    bits: &'a [u16],
    kv_dim: usize,
}

/// Per-row online-softmax state.
#[derive(Clone, Copy)]
struct RowState {
    max: f32,
    sum: f32,
}

/// The rows of `tokens` × the query heads sharing `kv_head`, written into `out` (the rows of
/// `tokens`, `n_head * head_dim` each).
#[allow(clippy::too_many_arguments)]
fn attend_rows(
    shape: &AttnShape,
    queries: &Queries,
    tokens: std::ops::Range<usize>,
    kv_head: usize,
    keys: &TransposedKeys,
    values: &Values,
    kernels: Kernels,
    out: &mut [f32],
) {
    let hd = shape.head_dim;
    let q_dim = shape.n_head * hd;
    let group = shape.n_head / shape.n_head_kv;
    let scores = shape.scores();
    let n_rows = tokens.len() * group;
    // Row r: token `tokens.start + r / group`, head `kv_head * group + r % group`.
    let token_of = |r: usize| tokens.start + r / group;
    let head_of = |r: usize| kv_head * group + r % group;
    let q_row = |r: usize| &queries.q[token_of(r) * q_dim + head_of(r) * hd..][..hd];
    let mut acc = vec![0f32; n_rows.next_multiple_of(ROWS) * hd];
    let mut state = vec![
        RowState {
            max: f32::NEG_INFINITY,
            sum: 0.0,
        };
        n_rows
    ];
    let mut probs = [[0f32; TILE]; ROWS];
    let max_pos = queries.pos.iter().copied().max().unwrap_or(0);
    for rb in (0..n_rows).step_by(ROWS) {
        let nr = ROWS.min(n_rows - rb);
        let rows: [usize; ROWS] = std::array::from_fn(|i| rb + i.min(nr - 1));
        let span = |i: usize| {
            let pos = queries.pos[token_of(rows[i])];
            (queries.first(pos), queries.last(pos, max_pos))
        };
        let lo = (0..nr).map(|i| span(i).0).min().unwrap();
        let hi = (0..nr).map(|i| span(i).1).max().unwrap();
        let q: [&[f32]; ROWS] = std::array::from_fn(|i| q_row(rows[i]));
        let acc_rows = &mut acc[rb * hd..(rb + ROWS) * hd];
        for tile in lo / TILE..=hi / TILE {
            let t0 = tile * TILE;
            (kernels.scores)(q, keys.tile(kv_head, tile), hd, &mut probs);
            for (i, p) in probs.iter_mut().enumerate().take(nr) {
                let (first, pos) = span(i);
                for (j, s) in p.iter_mut().enumerate() {
                    let visible = (first..=pos).contains(&(t0 + j));
                    *s = if visible {
                        scores.apply(*s)
                    } else {
                        f32::NEG_INFINITY
                    };
                }
                softmax_step(
                    p,
                    &mut state[rb + i],
                    &mut acc_rows[i * hd..(i + 1) * hd],
                    kernels.exp16,
                );
            }
            for p in probs.iter_mut().skip(nr) {
                p.fill(0.0);
            }
            let n_pos = TILE.min(hi + 1 - t0);
            let v_start = t0 * values.kv_dim + kv_head * hd;
            (kernels.weigh)(&probs, n_pos, values, v_start, hd, acc_rows);
        }
    }
    for (r, st) in state.iter().enumerate() {
        let inv = if st.sum == 0.0 { 0.0 } else { 1.0 / st.sum };
        let local = (token_of(r) - tokens.start) * q_dim + head_of(r) * hd;
        for (o, a) in out[local..local + hd].iter_mut().zip(&acc[r * hd..]) {
            *o = a * inv;
        }
    }
}

/// One tile's online-softmax step for one row: `p` holds the scaled, masked scores on entry
/// and the probabilities on exit; the accumulator is rescaled if the maximum grew.
fn softmax_step(p: &mut [f32; TILE], st: &mut RowState, acc: &mut [f32], exp16: Exp16) {
    let tile_max = p
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| if m > x { m } else { x });
    if tile_max == f32::NEG_INFINITY {
        p.fill(0.0);
        return;
    }
    let new_max = st.max.max(tile_max);
    if new_max > st.max {
        let ms = mathf::expf(st.max - new_max);
        acc.iter_mut().for_each(|a| *a *= ms);
        st.sum *= ms;
    }
    st.max = new_max;
    let mut sum = 0f64;
    for chunk in p.chunks_exact_mut(16) {
        let chunk: &mut [f32; 16] = chunk.try_into().unwrap();
        chunk.iter_mut().for_each(|x| *x -= new_max);
        exp16(chunk);
        sum += reduce16(*chunk) as f64;
    }
    st.sum = (st.sum as f64 + sum) as f32;
}

type Scores = fn([&[f32]; ROWS], &[f32], usize, &mut [[f32; TILE]; ROWS]);
type Weigh = fn(&[[f32; TILE]; ROWS], usize, &Values, usize, usize, &mut [f32]);
type Exp16 = fn(&mut [f32; 16]);

/// The micro-kernels for this CPU.
#[derive(Clone, Copy)]
struct Kernels {
    /// Four rows' raw scores against a transposed key tile.
    scores: Scores,
    /// Four rows' accumulators plus their probabilities times the tile's value rows.
    weigh: Weigh,
    exp16: Exp16,
}

impl Kernels {
    /// The kernels of `isa` (which this CPU must support) for heads of `hd` dimensions.
    fn pick(isa: Isa, hd: usize) -> Kernels {
        #[cfg(target_arch = "x86_64")]
        if hd.is_multiple_of(TILE) {
            match isa {
                Isa::Avx512 => {
                    return Kernels {
                        scores: x86::scores,
                        weigh: x86::weigh,
                        exp16: x86::exp16,
                    }
                }
                Isa::Avx2 => {
                    return Kernels {
                        scores: x86_avx2::scores,
                        weigh: x86_avx2::weigh,
                        exp16: x86_avx2::exp16,
                    }
                }
                _ => {}
            }
        }
        let _ = (isa, hd);
        Kernels::portable()
    }

    fn portable() -> Kernels {
        Kernels {
            scores: portable::scores,
            weigh: portable::weigh,
            exp16: portable::exp16,
        }
    }
}

/// Scalar kernels with the same operation order as the vector ones.
mod portable {
    use super::{Values, ROWS, TILE};
    use crate::ops::expf::expf_ggml;
    use half::f16;

    pub(super) fn scores(q: [&[f32]; ROWS], kt: &[f32], hd: usize, out: &mut [[f32; TILE]; ROWS]) {
        for (o, q) in out.iter_mut().zip(q) {
            o.fill(0.0);
            for d in 0..hd {
                let k = &kt[d * TILE..(d + 1) * TILE];
                for (s, k) in o.iter_mut().zip(k) {
                    *s = k.mul_add(q[d], *s);
                }
            }
        }
    }

    pub(super) fn weigh(
        p: &[[f32; TILE]; ROWS],
        n_pos: usize,
        values: &Values,
        v_start: usize,
        hd: usize,
        acc: &mut [f32],
    ) {
        for (p, acc) in p.iter().zip(acc.chunks_exact_mut(hd)) {
            for (j, &w) in p.iter().enumerate().take(n_pos) {
                let v = &values.bits[v_start + j * values.kv_dim..][..hd];
                for (a, v) in acc.iter_mut().zip(v) {
                    *a = f16::from_bits(*v).to_f32().mul_add(w, *a);
                }
            }
        }
    }

    pub(super) fn exp16(x: &mut [f32; 16]) {
        x.iter_mut().for_each(|v| *v = expf_ggml(*v));
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)] // micro-kernels index rows and lanes of several arrays at once
mod x86 {
    use super::{Values, ROWS, TILE};
    use std::arch::x86_64::*;

    pub(super) fn scores(q: [&[f32]; ROWS], kt: &[f32], hd: usize, out: &mut [[f32; TILE]; ROWS]) {
        assert!(kt.len() >= hd * TILE && q.iter().all(|q| q.len() >= hd));
        // SAFETY: `Kernels::pick` installs this only for a CPU with AVX-512; lengths checked above.
        unsafe { scores_avx512(q, kt, hd, out) }
    }

    #[target_feature(enable = "avx512f,fma")]
    unsafe fn scores_avx512(
        q: [&[f32]; ROWS],
        kt: &[f32],
        hd: usize,
        out: &mut [[f32; TILE]; ROWS],
    ) {
        let mut acc = [[_mm512_setzero_ps(); 4]; ROWS];
        // SAFETY (whole body): `d < hd`, and the caller checked `kt` holds `hd * TILE` floats
        // and every `q` row `hd`.
        unsafe {
            for d in 0..hd {
                let k = kt.as_ptr().add(d * TILE);
                let kv = [
                    _mm512_loadu_ps(k),
                    _mm512_loadu_ps(k.add(16)),
                    _mm512_loadu_ps(k.add(32)),
                    _mm512_loadu_ps(k.add(48)),
                ];
                for r in 0..ROWS {
                    let qv = _mm512_set1_ps(*q[r].get_unchecked(d));
                    for j in 0..4 {
                        acc[r][j] = _mm512_fmadd_ps(kv[j], qv, acc[r][j]);
                    }
                }
            }
            for r in 0..ROWS {
                for j in 0..4 {
                    _mm512_storeu_ps(out[r].as_mut_ptr().add(16 * j), acc[r][j]);
                }
            }
        }
    }

    pub(super) fn weigh(
        p: &[[f32; TILE]; ROWS],
        n_pos: usize,
        values: &Values,
        v_start: usize,
        hd: usize,
        acc: &mut [f32],
    ) {
        assert!(n_pos <= TILE && acc.len() >= ROWS * hd && hd.is_multiple_of(TILE));
        assert!(n_pos == 0 || v_start + (n_pos - 1) * values.kv_dim + hd <= values.bits.len());
        // SAFETY: installed only for a CPU with AVX-512 (F16C, FMA); bounds checked above.
        unsafe { weigh_avx512(p, n_pos, values, v_start, hd, acc) }
    }

    #[target_feature(enable = "avx512f,f16c,fma")]
    unsafe fn weigh_avx512(
        p: &[[f32; TILE]; ROWS],
        n_pos: usize,
        values: &Values,
        v_start: usize,
        hd: usize,
        acc: &mut [f32],
    ) {
        // SAFETY (whole body): value rows `v_start + j * kv_dim .. + hd` for `j < n_pos` and
        // accumulator rows `r * hd .. + hd` are in bounds (checked by the caller).
        unsafe {
            for c in (0..hd).step_by(64) {
                let mut a = [[_mm512_setzero_ps(); 4]; ROWS];
                for r in 0..ROWS {
                    for j in 0..4 {
                        a[r][j] = _mm512_loadu_ps(acc.as_ptr().add(r * hd + c + 16 * j));
                    }
                }
                for t in 0..n_pos {
                    let v = values.bits.as_ptr().add(v_start + t * values.kv_dim + c);
                    let vv = [
                        _mm512_cvtph_ps(_mm256_loadu_si256(v.cast())),
                        _mm512_cvtph_ps(_mm256_loadu_si256(v.add(16).cast())),
                        _mm512_cvtph_ps(_mm256_loadu_si256(v.add(32).cast())),
                        _mm512_cvtph_ps(_mm256_loadu_si256(v.add(48).cast())),
                    ];
                    for r in 0..ROWS {
                        let w = _mm512_set1_ps(p[r][t]);
                        for j in 0..4 {
                            a[r][j] = _mm512_fmadd_ps(vv[j], w, a[r][j]);
                        }
                    }
                }
                for r in 0..ROWS {
                    for j in 0..4 {
                        _mm512_storeu_ps(acc.as_mut_ptr().add(r * hd + c + 16 * j), a[r][j]);
                    }
                }
            }
        }
    }

    pub(super) fn exp16(x: &mut [f32; 16]) {
        // SAFETY: installed only for a CPU with AVX-512F/DQ.
        unsafe { exp16_avx512(x) }
    }

    /// [`exp16`]'s body, compiled with the features it needs so that the load, store and
    /// `v_expf` inline.
    #[target_feature(enable = "avx512f,avx512dq")]
    fn exp16_avx512(x: &mut [f32; 16]) {
        // SAFETY: 16 floats in and out.
        unsafe {
            let v = crate::ops::expf::x86::v_expf(_mm512_loadu_ps(x.as_ptr()));
            _mm512_storeu_ps(x.as_mut_ptr(), v);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)] // micro-kernels index rows and lanes of several arrays at once
mod x86_avx2 {
    //! The AVX2 (+F16C, FMA) micro-kernels: the same per-element chains of fused
    //! multiply-adds as the AVX-512 ones, in 8-lane vectors, two rows at a time for the scores
    //! and four rows by sixteen dimensions for the values, to fit sixteen registers.
    use super::{Values, ROWS, TILE};
    use std::arch::x86_64::*;

    pub(super) fn scores(q: [&[f32]; ROWS], kt: &[f32], hd: usize, out: &mut [[f32; TILE]; ROWS]) {
        assert!(kt.len() >= hd * TILE && q.iter().all(|q| q.len() >= hd));
        // SAFETY: `Kernels::pick` installs this only for a CPU with AVX2 and FMA; lengths
        // checked above.
        unsafe { scores_avx2(q, kt, hd, out) }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn scores_avx2(q: [&[f32]; ROWS], kt: &[f32], hd: usize, out: &mut [[f32; TILE]; ROWS]) {
        // SAFETY (whole body): `d < hd`, and the caller checked `kt` holds `hd * TILE` floats
        // and every `q` row `hd`.
        unsafe {
            for rp in 0..ROWS / 2 {
                for half in 0..2 {
                    let mut acc = [[_mm256_setzero_ps(); 4]; 2];
                    for d in 0..hd {
                        let k = kt.as_ptr().add(d * TILE + 32 * half);
                        let kv = [
                            _mm256_loadu_ps(k),
                            _mm256_loadu_ps(k.add(8)),
                            _mm256_loadu_ps(k.add(16)),
                            _mm256_loadu_ps(k.add(24)),
                        ];
                        for r in 0..2 {
                            let qv = _mm256_set1_ps(*q[2 * rp + r].get_unchecked(d));
                            for j in 0..4 {
                                acc[r][j] = _mm256_fmadd_ps(kv[j], qv, acc[r][j]);
                            }
                        }
                    }
                    for r in 0..2 {
                        for j in 0..4 {
                            let o = out[2 * rp + r].as_mut_ptr().add(32 * half + 8 * j);
                            _mm256_storeu_ps(o, acc[r][j]);
                        }
                    }
                }
            }
        }
    }

    pub(super) fn weigh(
        p: &[[f32; TILE]; ROWS],
        n_pos: usize,
        values: &Values,
        v_start: usize,
        hd: usize,
        acc: &mut [f32],
    ) {
        assert!(n_pos <= TILE && acc.len() >= ROWS * hd && hd.is_multiple_of(TILE));
        assert!(n_pos == 0 || v_start + (n_pos - 1) * values.kv_dim + hd <= values.bits.len());
        // SAFETY: installed only for a CPU with AVX2, F16C and FMA; bounds checked above.
        unsafe { weigh_avx2(p, n_pos, values, v_start, hd, acc) }
    }

    #[target_feature(enable = "avx2,f16c,fma")]
    unsafe fn weigh_avx2(
        p: &[[f32; TILE]; ROWS],
        n_pos: usize,
        values: &Values,
        v_start: usize,
        hd: usize,
        acc: &mut [f32],
    ) {
        // SAFETY (whole body): value rows `v_start + j * kv_dim .. + hd` for `j < n_pos` and
        // accumulator rows `r * hd .. + hd` are in bounds (checked by the caller).
        unsafe {
            for c in (0..hd).step_by(16) {
                let mut a = [[_mm256_setzero_ps(); 2]; ROWS];
                for r in 0..ROWS {
                    for j in 0..2 {
                        a[r][j] = _mm256_loadu_ps(acc.as_ptr().add(r * hd + c + 8 * j));
                    }
                }
                for t in 0..n_pos {
                    let v = values.bits.as_ptr().add(v_start + t * values.kv_dim + c);
                    let vv = [
                        _mm256_cvtph_ps(_mm_loadu_si128(v.cast())),
                        _mm256_cvtph_ps(_mm_loadu_si128(v.add(8).cast())),
                    ];
                    for r in 0..ROWS {
                        let w = _mm256_set1_ps(p[r][t]);
                        for j in 0..2 {
                            a[r][j] = _mm256_fmadd_ps(vv[j], w, a[r][j]);
                        }
                    }
                }
                for r in 0..ROWS {
                    for j in 0..2 {
                        _mm256_storeu_ps(acc.as_mut_ptr().add(r * hd + c + 8 * j), a[r][j]);
                    }
                }
            }
        }
    }

    pub(super) fn exp16(x: &mut [f32; 16]) {
        // SAFETY: installed only for a CPU with AVX2 and FMA.
        unsafe { exp16_avx2(x) }
    }

    /// [`exp16`]'s body, compiled with the features it needs so that the loads, stores and
    /// `v_expf8` inline (from a plain function each was a call).
    #[target_feature(enable = "avx2,fma")]
    fn exp16_avx2(x: &mut [f32; 16]) {
        for h in 0..2 {
            // SAFETY: 8 floats in and out at `8h` of 16.
            unsafe {
                let p = x.as_mut_ptr().add(8 * h);
                _mm256_storeu_ps(p, crate::ops::expf::x86::v_expf8(_mm256_loadu_ps(p)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize, seed: &mut u64, scale: f32) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0) * scale
            })
            .collect()
    }

    struct Case {
        shape: AttnShape,
        q: Vec<f32>,
        pos: Vec<usize>,
        keys: Vec<f16>,
        values: Vec<f16>,
        bidirectional: bool,
    }

    fn case(n_head: usize, n_kv: usize, hd: usize, start: usize, n: usize) -> Case {
        let mut seed = 11;
        let ctx = start + n;
        let to16 = |v: Vec<f32>| v.into_iter().map(f16::from_f32).collect::<Vec<_>>();
        Case {
            shape: AttnShape {
                n_head,
                n_head_kv: n_kv,
                head_dim: hd,
                scale: 1.0 / (hd as f32).sqrt(),
                softcap: 0.0,
            },
            q: random(n * n_head * hd, &mut seed, 3.0),
            pos: (start..start + n).collect(),
            keys: to16(random(ctx * n_kv * hd, &mut seed, 2.0)),
            values: to16(random(ctx * n_kv * hd, &mut seed, 1.0)),
            bidirectional: false,
        }
    }

    fn run(c: &Case, window: Option<usize>, kernels: Option<Kernels>) -> Vec<f32> {
        let queries = Queries {
            q: &c.q,
            pos: &c.pos,
            window,
            bidirectional: c.bidirectional,
        };
        let mut out = vec![0f32; c.q.len()];
        match kernels {
            None => attend(&c.shape, &queries, &c.keys, &c.values, &mut out),
            Some(k) => {
                let hd = c.shape.head_dim;
                let max_pos = *c.pos.iter().max().unwrap();
                let keys = TransposedKeys::build(&c.keys, c.shape.n_head_kv, hd, 0, max_pos);
                let values = Values {
                    bits: f16_bits(&c.values),
                    kv_dim: c.shape.n_head_kv * hd,
                };
                for kv in 0..c.shape.n_head_kv {
                    attend_rows(
                        &c.shape,
                        &queries,
                        0..c.pos.len(),
                        kv,
                        &keys,
                        &values,
                        k,
                        &mut out,
                    );
                }
            }
        }
        out
    }

    /// Softmax attention in f64, the plain way.
    fn exact(c: &Case, window: Option<usize>) -> Vec<f32> {
        let hd = c.shape.head_dim;
        let q_dim = c.shape.n_head * hd;
        let kv_dim = c.shape.n_head_kv * hd;
        let group = c.shape.n_head / c.shape.n_head_kv;
        let mut out = vec![0f32; c.q.len()];
        let max_pos = *c.pos.iter().max().unwrap();
        for (t, &own) in c.pos.iter().enumerate() {
            let first = window.map_or(0, |w| (own + 1).saturating_sub(w));
            let pos = if c.bidirectional { max_pos } else { own };
            for h in 0..c.shape.n_head {
                let q = &c.q[t * q_dim + h * hd..][..hd];
                let at = |p: usize, d: usize| p * kv_dim + (h / group) * hd + d;
                let scores: Vec<f64> = (first..=pos)
                    .map(|p| {
                        let dot: f64 = (0..hd)
                            .map(|d| q[d] as f64 * c.keys[at(p, d)].to_f64())
                            .sum();
                        dot * c.shape.scale as f64
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let w: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let total: f64 = w.iter().sum();
                for d in 0..hd {
                    let v: f64 = (first..=pos)
                        .zip(&w)
                        .map(|(p, w)| w * c.values[at(p, d)].to_f64())
                        .sum();
                    out[t * q_dim + h * hd + d] = (v / total) as f32;
                }
            }
        }
        out
    }

    #[test]
    fn matches_exact_attention() {
        for (n_head, n_kv, hd, start, n, window) in [
            (4, 1, 64, 0, 70, None),
            (6, 2, 128, 100, 80, None),
            (3, 3, 64, 0, 150, Some(40)),
        ] {
            let c = case(n_head, n_kv, hd, start, n);
            let got = run(&c, window, None);
            let want = exact(&c, window);
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-5, "{n_head}/{n_kv}/{hd}: max diff {worst}");
        }
    }

    #[test]
    fn bidirectional_rows_see_the_whole_run() {
        for (n_head, n_kv, hd, start, n, window) in
            [(4, 1, 64, 0, 70, None), (4, 2, 64, 30, 100, Some(40))]
        {
            let mut c = case(n_head, n_kv, hd, start, n);
            c.bidirectional = true;
            let got = run(&c, window, None);
            let worst = got
                .iter()
                .zip(&exact(&c, window))
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-5, "{n_head}/{n_kv}/{hd}: max diff {worst}");
            // The last token sees what it saw causally; the first does not.
            let q_dim = n_head * hd;
            c.bidirectional = false;
            let causal = run(&c, window, None);
            assert_eq!(got[(n - 1) * q_dim..], causal[(n - 1) * q_dim..]);
            assert_ne!(got[..q_dim], causal[..q_dim]);
        }
    }

    #[test]
    fn vector_and_portable_kernels_agree_bit_for_bit() {
        for (n_head, n_kv, hd, start, n, window) in [
            (4, 1, 64, 0, 70, None),
            (7, 1, 128, 30, 67, None),
            (4, 1, 256, 0, 130, Some(50)),
        ] {
            let c = case(n_head, n_kv, hd, start, n);
            let portable = run(&c, window, Some(Kernels::portable()));
            for isa in crate::cpu::available() {
                let vector = run(&c, window, Some(Kernels::pick(isa, hd)));
                assert!(
                    vector
                        .iter()
                        .zip(&portable)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{isa:?} {n_head}/{n_kv}/{hd}"
                );
            }
            // the parallel driver computes the same rows
            assert_eq!(run(&c, window, None), portable);
        }
    }

    #[test]
    fn a_single_visible_position_returns_its_value() {
        let c = case(2, 1, 64, 0, 64);
        let out = run(&c, Some(1), None);
        let hd = 64;
        for (t, row) in out.chunks_exact(2 * hd).enumerate() {
            for h in 0..2 {
                let want: Vec<f32> = c.values[t * hd..(t + 1) * hd]
                    .iter()
                    .map(|v| v.to_f32())
                    .collect();
                assert_eq!(&row[h * hd..(h + 1) * hd], &want[..], "token {t}");
            }
        }
    }
}
