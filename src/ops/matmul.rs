//! The one place where activations meet weights: `out = x · Wᵀ` for a batch of activation rows
//! and a (possibly quantized) weight matrix. Activations are quantized once per call to the
//! weight type's partner format, then rows of the weight matrix are split across the thread pool.

use crate::quant::{self, GgmlType};
use rayon::prelude::*;

/// A weight matrix: `rows` output features, each a row of `cols` elements of type `ty`.
#[derive(Clone, Copy, Debug)]
pub struct QMat<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
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
}

/// Weight rows handed to one task: enough work to amortise scheduling.
const MIN_ROWS_PER_TASK: usize = 16;

/// `out[t][r] = dot(x[t], W[r])` for `n` activation rows `x` (`n × w.cols`), `out` is `n × w.rows`.
pub fn matmul(w: &QMat, x: &[f32], n: usize, out: &mut [f32]) {
    assert_eq!(x.len(), n * w.cols, "matmul: activation shape");
    assert_eq!(out.len(), n * w.rows, "matmul: output shape");
    let act_ty = w.ty.vec_dot_type();
    let act_row = act_ty.block_bytes() * (w.cols / act_ty.block_elems());
    let mut qx = vec![0u8; n * act_row];
    qx.par_chunks_mut(act_row)
        .zip(x.par_chunks(w.cols))
        .with_min_len(8)
        .for_each(|(dst, src)| quant::quantize_row(act_ty, src, dst));

    let rows_per_task = task_rows(w.rows);
    if n == 1 {
        out.par_chunks_mut(rows_per_task)
            .enumerate()
            .for_each(|(task, chunk)| {
                let r0 = task * rows_per_task;
                for (i, o) in chunk.iter_mut().enumerate() {
                    *o = quant::vec_dot(w.ty, w.cols, w.row(r0 + i), &qx);
                }
            });
        return;
    }
    // Weight-row major: each weight row is loaded once and dotted with every activation row.
    let mut by_row = vec![0f32; w.rows * n];
    by_row
        .par_chunks_mut(rows_per_task * n)
        .enumerate()
        .for_each(|(task, chunk)| {
            let r0 = task * rows_per_task;
            for (i, dst) in chunk.chunks_exact_mut(n).enumerate() {
                quant::vec_dot_rows(w.ty, w.cols, w.row(r0 + i), &qx, act_row, dst);
            }
        });
    for (r, col) in by_row.chunks_exact(n).enumerate() {
        for (t, v) in col.iter().enumerate() {
            out[t * w.rows + r] = *v;
        }
    }
}

fn task_rows(rows: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    (rows / (threads * 8))
        .max(MIN_ROWS_PER_TASK)
        .min(rows.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn f32_matmul_matches_naive() {
        let (rows, cols, n) = (37, 8, 3);
        let w: Vec<f32> = (0..rows * cols).map(|i| (i % 7) as f32 - 3.0).collect();
        let x: Vec<f32> = (0..n * cols).map(|i| (i % 5) as f32 * 0.5).collect();
        let bytes = f32_bytes(&w);
        let m = QMat {
            ty: GgmlType::F32,
            rows,
            cols,
            data: &bytes,
        };
        for n in [1, n] {
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
