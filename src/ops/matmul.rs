//! The one place where activations meet weights: `out = x · Wᵀ` for a batch of activation rows
//! and a (possibly quantized) weight matrix. Activations are quantized once per call to the
//! weight type's partner format, then rows of the weight matrix are split across the thread pool.

use crate::pool;
use crate::quant::{self, GgmlType};

/// A weight matrix: `rows` output features, each a row of `cols` elements of type `ty`.
#[derive(Clone, Copy, Debug)]
pub struct QMat<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
    /// The same rows regrouped eight at a time (`quant::x8`, K-quants), when the model
    /// made that copy for the CPU; products then read it instead of `data`.
    pub x8: Option<&'a [u8]>,
}

impl<'a> QMat<'a> {
    /// Bytes in one row.
    pub fn row_bytes(&self) -> usize {
        self.cols / self.ty.block_elems() * self.ty.block_bytes()
    }

    /// The raw bytes of row `r`.
    pub fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Row `r` as f32.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        quant::dequantize_row(self.ty, self.row(r), out);
    }

    /// Rows `rows` as a matrix of their own (a sub-slice of the bytes, nothing copied; the
    /// regrouped copy only when the range is whole groups of eight rows).
    pub fn row_range(&self, rows: std::ops::Range<usize>) -> QMat<'a> {
        let rb = self.row_bytes();
        let whole_groups = quant::x8::whole_groups(&rows);
        QMat {
            rows: rows.len(),
            data: &self.data[rows.start * rb..rows.end * rb],
            x8: self
                .x8
                .filter(|_| whole_groups)
                .map(|x| &x[rows.start * rb..rows.end * rb]),
            ..*self
        }
    }
}

/// Weight rows handed to one task at least: enough work to amortise scheduling.
const MIN_ROWS_PER_TASK: usize = 16;

/// Matrix-vector products over fewer weight bytes run on the calling thread: handing work to
/// the pool costs more than the ~10 µs such a matrix takes to stream.
const MIN_PARALLEL_BYTES: usize = 192 * 1024;

/// Batches at least this many rows per thread are split by activation rows (token blocks);
/// smaller ones by weight rows.
const MIN_TOKENS_PER_THREAD: usize = 8;

/// `out[t][r] = dot(x[t], W[r])` for `n` activation rows `x` (`n × w.cols`), `out` is `n × w.rows`.
///
/// One activation row (generation): weight rows are split into a few large chunks per thread,
/// each one call into the kernels. Batches (prefill): activation rows are split into blocks that
/// stay in L2 while every weight row streams past them once, so each weight block is decoded
/// once per block of tokens and results land in place.
pub fn matmul(w: &QMat, x: &[f32], n: usize, out: &mut [f32]) {
    assert_eq!(x.len(), n * w.cols, "matmul: activation shape");
    assert_eq!(out.len(), n * w.rows, "matmul: output shape");
    if n == 0 {
        // No rows (a forward pass that asks for no logits: a prompt chunk that does not end
        // its prompt).
        return;
    }
    let pool = pool::global();
    // Batches for the tile kernels: each task converts its own tokens (rounded and widened
    // for F16/BF16, quantized for the others), on its thread, just before its tiles read them.
    if w.x8.is_none() && quant::has_gemm(w.ty) && n >= quant::min_gemm_tokens(w.ty).max(2) {
        return tiled(w, x, n, out);
    }
    let act_ty = w.ty.vec_dot_type();
    let act_row = act_ty.block_bytes() * (w.cols / act_ty.block_elems());
    let mut qx = vec![0u8; n * act_row];
    if n >= 8 {
        pool.for_each_chunk(&mut qx, 4 * act_row, |i, dst| {
            let src = &x[i * 4 * w.cols..];
            for (d, s) in dst.chunks_exact_mut(act_row).zip(src.chunks_exact(w.cols)) {
                quant::quantize_row(act_ty, s, d);
            }
        });
    } else {
        for (dst, src) in qx.chunks_exact_mut(act_row).zip(x.chunks_exact(w.cols)) {
            quant::quantize_row(act_ty, src, dst);
        }
    }

    if let Some(x8) = w.x8 {
        return regrouped(w, x8, &qx, n, out);
    }
    let threads = pool.threads();
    let rb = w.row_bytes();
    if n == 1 && quant::has_matvec(w.ty) {
        let packed = quant::pack_single(w.ty, w.cols, &qx);
        if w.data.len() < MIN_PARALLEL_BYTES {
            return quant::matvec(w.data, &packed, out);
        }
        let rows_per_task = task_rows(w.rows, threads).next_multiple_of(4);
        pool.for_each_chunk(out, rows_per_task, |task, chunk| {
            let r0 = task * rows_per_task;
            quant::matvec(&w.data[r0 * rb..(r0 + chunk.len()) * rb], &packed, chunk);
        });
        return;
    }
    if n == 1 && w.data.len() < MIN_PARALLEL_BYTES {
        quant::vec_dot_many(w.ty, w.cols, w.data, &qx, out);
        return;
    }
    if n == 1 {
        let rows_per_task = task_rows(w.rows, threads);
        pool.for_each_chunk(out, rows_per_task, |task, chunk| {
            let r0 = task * rows_per_task;
            let rows = &w.data[r0 * rb..(r0 + chunk.len()) * rb];
            quant::vec_dot_many(w.ty, w.cols, rows, &qx, chunk);
        });
        return;
    }
    if n >= MIN_TOKENS_PER_THREAD * threads {
        let block = token_block(n, threads);
        pool.for_each_chunk(out, block * w.rows, |i, o| {
            let nt = o.len() / w.rows;
            let acts = &qx[i * block * act_row..][..nt * act_row];
            let mut col = vec![0f32; nt];
            for r in 0..w.rows {
                let wr = w.row(r);
                quant::vec_dot_rows(w.ty, w.cols, wr, acts, act_row, &mut col);
                for (t, v) in col.iter().enumerate() {
                    o[t * w.rows + r] = *v;
                }
            }
        });
        return;
    }
    // A few activation rows: weight-row major, each weight row dotted with every activation
    // row, then transposed.
    let rows_per_task = task_rows(w.rows, threads);
    let mut by_row = vec![0f32; w.rows * n];
    pool.for_each_chunk(&mut by_row, rows_per_task * n, |task, chunk| {
        let r0 = task * rows_per_task;
        for (i, dst) in chunk.chunks_exact_mut(n).enumerate() {
            quant::vec_dot_rows(w.ty, w.cols, w.row(r0 + i), &qx, act_row, dst);
        }
    });
    transpose_into(&by_row, n, out, w.rows);
}

/// A product with the regrouped copy `x8` of `w` (`quant::x8`), split by weight rows in
/// whole groups of eight: one token through the matrix-vector kernel, a batch through the
/// kernel that takes up to four tokens per pass over a group (then transposed).
fn regrouped(w: &QMat, x8: &[u8], qx: &[u8], n: usize, out: &mut [f32]) {
    use quant::x8;
    let pool = pool::global();
    let rb = w.row_bytes();
    let rows_per_task = task_rows(w.rows, pool.threads()).next_multiple_of(x8::ROWS);
    if n == 1 {
        let packed = quant::pack_single(w.ty, w.cols, qx);
        if x8.len() < MIN_PARALLEL_BYTES {
            return x8::matvec(x8, &packed, out);
        }
        pool.for_each_chunk(out, rows_per_task, |task, chunk| {
            let r0 = task * rows_per_task;
            x8::matvec(&x8[r0 * rb..(r0 + chunk.len()) * rb], &packed, chunk);
        });
        return;
    }
    let n_blocks = w.cols / quant::QK_K;
    let mut by_row = vec![0f32; w.rows * n];
    pool.for_each_chunk(&mut by_row, rows_per_task * n, |task, chunk| {
        let r0 = task * rows_per_task;
        let nr = chunk.len() / n;
        let rows = &x8[r0 * rb..(r0 + nr) * rb];
        x8::gemm(w.ty, rows, nr, n_blocks, qx, chunk, 1, n);
    });
    transpose_into(&by_row, n, out, w.rows);
}

/// Tokens `t` of the activation rows `x` packed for the tile kernels of `w`: rounded to the
/// weight format and widened back (F16, BF16) or quantized to its partner format (the others),
/// four rows per task (inside a task of the pool's, a token block, this runs on the task's own
/// thread), then repacked.
fn pack(w: &QMat, x: &[f32], t: std::ops::Range<usize>) -> quant::PackedActs {
    let cols = w.cols;
    let src = &x[t.start * cols..t.end * cols];
    let widens = quant::widens_acts(w.ty);
    let at = w.ty.vec_dot_type();
    // Bytes (quantized) or floats (widened) per row, and per row group of a task.
    let row = if widens {
        cols
    } else {
        at.block_bytes() * (cols / at.block_elems())
    };
    let convert = |i: usize, n_rows: usize, dst: &mut dyn FnMut(usize, &[f32])| {
        for (k, s) in src[i * 4 * cols..]
            .chunks_exact(cols)
            .take(n_rows)
            .enumerate()
        {
            dst(k, s);
        }
    };
    if widens {
        let mut half = vec![0f32; t.len().next_multiple_of(2) * cols];
        let widen = |i: usize, dst: &mut [f32]| {
            let mut scratch = Vec::new();
            convert(i, dst.len() / row, &mut |k, s| {
                quant::round_trip_row(w.ty, s, &mut dst[k * row..][..row], &mut scratch)
            });
        };
        run_rows(&mut half[..t.len() * cols], 4 * row, t.len(), widen);
        return quant::pack_widened(w.ty, cols, half, t.len());
    }
    let mut qx = vec![0u8; t.len() * row];
    let quantize = |i: usize, dst: &mut [u8]| {
        convert(i, dst.len() / row, &mut |k, s| {
            quant::quantize_row(at, s, &mut dst[k * row..][..row])
        });
    };
    run_rows(&mut qx, 4 * row, t.len(), quantize);
    quant::pack_acts(w.ty, cols, &qx, t.len())
}

/// `f(i, chunk)` over `chunk`-long pieces of `buf` (`n_rows` rows): on the pool from eight rows
/// on, else here in one piece.
fn run_rows<T: Send>(
    buf: &mut [T],
    chunk: usize,
    n_rows: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    if n_rows >= 8 {
        pool::global().for_each_chunk(buf, chunk, f);
    } else {
        f(0, buf);
    }
}

/// A batch through the tile kernels. Split by token blocks (results land in place), each task
/// packing its own tokens, so packing runs on the pool and its output is still in cache when
/// the tiles read it; or, for a few tokens, packed once and split by weight rows (then
/// transposed).
fn tiled(w: &QMat, x: &[f32], n: usize, out: &mut [f32]) {
    let pool = pool::global();
    let threads = pool.threads();
    let pairs = n.div_ceil(2);
    // By tokens only when every thread gets whole blocks of `MAX_PAIRS_PER_TASK` pairs: the
    // tiles decode each weight row once per call, so a small batch split by tokens would
    // decode every row once per token block (speculative verification, a few slots).
    if pairs >= MAX_PAIRS_PER_TASK * threads {
        // The fewest blocks that stay in L2, a whole number per thread: each block decodes
        // every weight row once, and a thread left with one block more than the others holds
        // up the product (196 tokens on 2 threads: 4 blocks of 25 pairs rather than 7 of 16,
        // Q8_0 tiles 150-168 → 166-177 GFLOP/s on Zen 4).
        let tasks = pairs.div_ceil(MAX_PAIRS_PER_TASK).next_multiple_of(threads);
        let block = pairs
            .div_ceil(tasks)
            .next_multiple_of(quant::pair_align(w.ty));
        pool.for_each_chunk(out, 2 * block * w.rows, |i, o| {
            let t0 = 2 * i * block;
            let packed = pack(w, x, t0..(t0 + 2 * block).min(n));
            quant::gemm(w.data, w.rows, &packed, 0..packed.n_pairs(), o, w.rows, 1);
        });
        return;
    }
    let packed = pack(w, x, 0..n);
    let rb = w.row_bytes();
    let rows_per_task = task_rows(w.rows, threads);
    let mut by_row = vec![0f32; w.rows * n];
    pool.for_each_chunk(&mut by_row, rows_per_task * n, |task, chunk| {
        let r0 = task * rows_per_task;
        let nr = chunk.len() / n;
        let rows = &w.data[r0 * rb..(r0 + nr) * rb];
        quant::gemm(rows, nr, &packed, 0..pairs, chunk, 1, n);
    });
    transpose_into(&by_row, n, out, w.rows);
}

/// `out[t * rows + r] = by_row[r * n + t]`.
fn transpose_into(by_row: &[f32], n: usize, out: &mut [f32], rows: usize) {
    for (r, col) in by_row.chunks_exact(n).enumerate() {
        for (t, v) in col.iter().enumerate() {
            out[t * rows + r] = *v;
        }
    }
}

/// Most token pairs per task when a batch is split by tokens: few enough that the packed
/// activations of a task stay in L2.
const MAX_PAIRS_PER_TASK: usize = 32;

/// Weight rows per task for splitting by rows: about four tasks per thread.
fn task_rows(rows: usize, threads: usize) -> usize {
    rows.div_ceil(threads * 4)
        .max(MIN_ROWS_PER_TASK)
        .min(rows.max(1))
}

/// Activation rows per task for splitting by tokens: about four blocks per thread, a multiple
/// of four (the kernels' row group), at most 64 (an L2-sized block of quantized activations).
fn token_block(n: usize, threads: usize) -> usize {
    n.div_ceil(threads * 4).next_multiple_of(4).clamp(4, 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Batches through the tiles (packed on the pool, by token blocks or whole) give each
    /// token the single-row dot product's bits.
    #[test]
    fn tiled_batches_match_the_single_row_dot() {
        let (rows, cols) = (21, 96);
        let wf: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 37.0)
            .collect();
        let x: Vec<f32> = (0..200 * cols)
            .map(|i| ((i * 53 % 89) as f32 - 44.0) / 13.0)
            .collect();
        for ty in [
            GgmlType::F16,
            GgmlType::BF16,
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
        ] {
            let rb = ty.bytes_for(cols as u64).unwrap() as usize;
            let mut bytes = vec![0u8; rows * rb];
            for (src, dst) in wf.chunks_exact(cols).zip(bytes.chunks_exact_mut(rb)) {
                quant::quantize_row(ty, src, dst);
            }
            let m = QMat {
                ty,
                rows,
                cols,
                data: &bytes,
                x8: None,
            };
            for n in [1, 2, 3, 9, 200] {
                let mut out = vec![0.0; n * rows];
                matmul(&m, &x[..n * cols], n, &mut out);
                let at = ty.vec_dot_type();
                let mut qa = vec![0u8; at.bytes_for(cols as u64).unwrap() as usize];
                for t in 0..n {
                    quant::quantize_row(at, &x[t * cols..][..cols], &mut qa);
                    for r in 0..rows {
                        let want = quant::vec_dot(ty, cols, m.row(r), &qa);
                        assert_eq!(
                            out[t * rows + r].to_bits(),
                            want.to_bits(),
                            "{ty} n{n} t{t} r{r}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn f32_matmul_matches_naive() {
        let (rows, cols, n) = (37, 8, 40);
        let w: Vec<f32> = (0..rows * cols).map(|i| (i % 7) as f32 - 3.0).collect();
        let x: Vec<f32> = (0..n * cols).map(|i| (i % 5) as f32 * 0.5).collect();
        let bytes = f32_bytes(&w);
        let m = QMat {
            ty: GgmlType::F32,
            rows,
            cols,
            data: &bytes,
            x8: None,
        };
        for n in [1, 3, n] {
            let mut out = vec![0.0; n * rows];
            matmul(&m, &x[..n * cols], n, &mut out);
            for t in 0..n {
                for r in 0..rows {
                    let want: f32 = (0..cols).map(|c| w[r * cols + c] * x[t * cols + c]).sum();
                    assert!((out[t * rows + r] - want).abs() < 1e-4, "t{t} r{r}");
                }
            }
        }
    }
}
