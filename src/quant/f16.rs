//! F16 tensors: IEEE half elements stored little-endian, no blocks. Conversion both ways and the
//! scalar reference dot product (F16 weights × F16 activations, as ggml pairs them).

use super::block::{f16_to_f32, f32_to_f16};

/// Converts `src` (2 bytes per element) to f32; exact.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len() * 2, "f16 row length mismatch");
    for (b, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *y = f16_to_f32([b[0], b[1]]);
    }
}

/// Converts `src` to half, rounding to nearest even (as F16C does for ggml on x86).
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    assert_eq!(dst.len(), src.len() * 2, "f16 row length mismatch");
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_f16(*x));
    }
}

/// Dot product of two f16 rows, accumulated in f64 as ggml's generic `ggml_vec_dot_f16` does.
pub fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len(), "f16 row length mismatch");
    let mut sum = 0f64;
    for (x, y) in w.chunks_exact(2).zip(a.chunks_exact(2)) {
        sum += (f16_to_f32([x[0], x[1]]) * f16_to_f32([y[0], y[1]])) as f64;
    }
    sum as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_is_exact_for_halves_and_rounds_ties_to_even() {
        let xs = [0.0f32, -1.5, 65504.0, 1.0 / 1024.0, 1.0 + 1.0 / 2048.0];
        let mut bytes = vec![0u8; xs.len() * 2];
        quantize(&xs, &mut bytes);
        let mut back = vec![0f32; xs.len()];
        dequantize(&bytes, &mut back);
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to the even mantissa, 1.0.
        assert_eq!(back, [0.0, -1.5, 65504.0, 1.0 / 1024.0, 1.0]);
    }
}
