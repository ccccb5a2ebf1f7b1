//! BF16 tensors: the top 16 bits of an f32, stored little-endian, no blocks. Conversion both
//! ways (rounding exactly as ggml's `ggml_compute_fp32_to_bf16`) and the scalar reference dot.

/// bf16 bits to f32; exact.
#[inline]
pub fn bf16_to_f32(bits: [u8; 2]) -> f32 {
    f32::from_bits((u16::from_le_bytes(bits) as u32) << 16)
}

/// f32 to bf16 bits: NaNs are made quiet, everything else rounds to nearest even.
#[inline]
pub fn f32_to_bf16(x: f32) -> [u8; 2] {
    let u = x.to_bits();
    let h = if u & 0x7fff_ffff > 0x7f80_0000 {
        (u >> 16) | 64
    } else {
        // Cannot overflow: the largest finite pattern plus 0x8000 stays below 2^32.
        (u + (0x7fff + ((u >> 16) & 1))) >> 16
    };
    (h as u16).to_le_bytes()
}

/// Converts `src` (2 bytes per element) to f32.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len() * 2, "bf16 row length mismatch");
    for (b, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
        *y = bf16_to_f32([b[0], b[1]]);
    }
}

/// Converts `src` to bf16.
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    assert_eq!(dst.len(), src.len() * 2, "bf16 row length mismatch");
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_bf16(*x));
    }
}

/// Dot product of two bf16 rows, accumulated in f64 as ggml's generic `ggml_vec_dot_bf16` does.
pub fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len(), "bf16 row length mismatch");
    let mut sum = 0f64;
    for (x, y) in w.chunks_exact(2).zip(a.chunks_exact(2)) {
        sum += (bf16_to_f32([x[0], x[1]]) * bf16_to_f32([y[0], y[1]])) as f64;
    }
    sum as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_matches_ggml() {
        // Halfway cases round to even; NaN stays NaN (quiet); infinities survive.
        let up = f32::from_bits(0x3f80_8000); // 1 + 2^-8: tie, mantissa of 1.0 is even
        assert_eq!(bf16_to_f32(f32_to_bf16(up)), 1.0);
        let up2 = f32::from_bits(0x3f81_8000); // tie above an odd mantissa: rounds up
        assert_eq!(f32_to_bf16(up2), 0x3f82u16.to_le_bytes());
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(
            f32_to_bf16(f32::from_bits(0x7f80_0001)),
            0x7fc0u16.to_le_bytes()
        );
        assert_eq!(bf16_to_f32(f32_to_bf16(f32::INFINITY)), f32::INFINITY);
    }
}
