//! The orthonormal Walsh-Hadamard rotation llama.cpp applies around a quantized KV cache: with
//! quantized keys, the queries and keys are rotated (after RoPE) in blocks of `n` values before
//! the keys are stored, which leaves every q·k unchanged but spreads outliers over the block
//! before quantization; with quantized values, the values are rotated before they are stored
//! and the attention output rotated back (the rotation is its own inverse). Computed as ggml's
//! CPU `fwht` computes it: each value scaled by `1/√n`, then butterflies of growing span
//! (`u + v`, `u - v`).

/// Rotates every block of `n` consecutive values of `x` (`n` a power of two dividing
/// `x.len()`).
pub fn hadamard(x: &mut [f32], n: usize) {
    assert!(
        n.is_power_of_two() && x.len().is_multiple_of(n),
        "hadamard: {} values in blocks of {n}",
        x.len()
    );
    let scale = 1.0 / (n as f32).sqrt();
    for block in x.chunks_exact_mut(n) {
        block.iter_mut().for_each(|v| *v *= scale);
        let mut span = 1;
        while span < n {
            for pair in block.chunks_exact_mut(2 * span) {
                let (lo, hi) = pair.split_at_mut(span);
                for (u, v) in lo.iter_mut().zip(hi.iter_mut()) {
                    let (a, b) = (*u, *v);
                    *u = a + b;
                    *v = a - b;
                }
            }
            span *= 2;
        }
    }
}

/// The block size llama.cpp rotates keys in for heads of `head_dim`: the largest power of two
/// (64 or more) dividing it; `None` when 64 does not divide it.
pub fn key_block(head_dim: usize) -> Option<usize> {
    if !head_dim.is_multiple_of(64) {
        return None;
    }
    let mut n = 64;
    while head_dim.is_multiple_of(2 * n) {
        n *= 2;
    }
    Some(n)
}

/// The block size llama.cpp rotates values in: 64, when it divides `head_dim`.
pub fn value_block(head_dim: usize) -> Option<usize> {
    head_dim.is_multiple_of(64).then_some(64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rotation_is_orthonormal_and_its_own_inverse() {
        let x: Vec<f32> = (0..128).map(|i| ((i * 37) % 19) as f32 - 9.0).collect();
        let mut y = x.clone();
        hadamard(&mut y, 64);
        let norm = |v: &[f32]| v.iter().map(|a| a * a).sum::<f32>();
        assert!((norm(&x[..64]) - norm(&y[..64])).abs() < 1e-3 * norm(&x[..64]));
        // the first output of a block is the block's sum over √n
        let sum: f32 = x[64..].iter().sum();
        assert!((y[64] - sum / 8.0).abs() < 1e-4);
        hadamard(&mut y, 64);
        for (a, b) in x.iter().zip(&y) {
            assert!((a - b).abs() < 1e-4, "{a} {b}");
        }
        // dot products survive the rotation
        let z: Vec<f32> = (0..128).map(|i| (i as f32 * 0.1).sin()).collect();
        let (mut xr, mut zr) = (x.clone(), z.clone());
        hadamard(&mut xr, 128);
        hadamard(&mut zr, 128);
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f32>();
        assert!((dot(&x, &z) - dot(&xr, &zr)).abs() < 1e-3);
    }

    #[test]
    fn block_sizes_follow_llama_cpp() {
        assert_eq!(key_block(64), Some(64));
        assert_eq!(key_block(128), Some(128));
        assert_eq!(key_block(192), Some(64));
        assert_eq!(key_block(256), Some(256));
        assert_eq!(key_block(80), None);
        assert_eq!(value_block(256), Some(64));
        assert_eq!(value_block(96), None);
    }
}
