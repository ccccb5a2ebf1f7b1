//! RMS normalisation, computed the way ggml does (sum of squares accumulated in f64).

/// Normalises each `dim`-long row of `x` in place to unit RMS and multiplies by `weight`.
pub fn rms_norm_rows(x: &mut [f32], weight: &[f32], dim: usize, eps: f32) {
    debug_assert_eq!(weight.len(), dim);
    for row in x.chunks_exact_mut(dim) {
        let scale = rms_scale(row, eps);
        for (v, w) in row.iter_mut().zip(weight) {
            *v = (*v * scale) * *w;
        }
    }
}

/// Like [`rms_norm_rows`], but writes the result to `out` and leaves `x` untouched.
pub fn rms_norm_rows_into(x: &[f32], weight: &[f32], dim: usize, eps: f32, out: &mut [f32]) {
    for (row, dst) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let scale = rms_scale(row, eps);
        for ((d, v), w) in dst.iter_mut().zip(row).zip(weight) {
            *d = (*v * scale) * *w;
        }
    }
}

fn rms_scale(row: &[f32], eps: f32) -> f32 {
    let sum: f64 = row.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / row.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_rms_after_norm() {
        let mut x = vec![1.0, 2.0, 3.0, 4.0, -1.0, -1.0, -1.0, -1.0];
        rms_norm_rows(&mut x, &[1.0; 4], 4, 0.0);
        let rms0 = (x[..4].iter().map(|v| v * v).sum::<f32>() / 4.0).sqrt();
        assert!((rms0 - 1.0).abs() < 1e-6);
        assert_eq!(&x[4..], &[-1.0; 4]);
    }

    #[test]
    fn weight_scales_each_column() {
        let x = vec![2.0, 2.0];
        let mut out = vec![0.0; 2];
        rms_norm_rows_into(&x, &[0.5, 3.0], 2, 0.0, &mut out);
        assert_eq!(out, vec![0.5, 3.0]);
    }
}
