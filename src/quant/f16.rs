//! F16 tensors: IEEE half elements stored little-endian, no blocks. Conversion both ways and the
//! scalar reference dot product (F16 weights × F16 activations, as ggml pairs them).

use half::f16;
use half::slice::HalfFloatSliceExt;

use super::block::f16_to_f32;

/// Elements converted per call of the `half` crate's slice conversions, which use F16C (or the
/// aarch64 FP16 instructions) eight at a time where the CPU has them: the element-by-element
/// calls cost a function call each, 2% of an F16 vision tower's time (matrix-product inputs
/// are rounded to half and widened back).
const CHUNK: usize = 64;

/// Converts `src` (2 bytes per element) to f32; exact.
pub fn dequantize(src: &[u8], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len() * 2, "f16 row length mismatch");
    let mut buf = [f16::ZERO; CHUNK];
    for (bytes, ys) in src.chunks(2 * CHUNK).zip(dst.chunks_mut(CHUNK)) {
        let h = &mut buf[..ys.len()];
        for (v, b) in h.iter_mut().zip(bytes.chunks_exact(2)) {
            *v = f16::from_le_bytes([b[0], b[1]]);
        }
        h.convert_to_f32_slice(ys);
    }
}

/// Converts `src` to half, rounding to nearest even (as F16C does for ggml on x86).
pub fn quantize(src: &[f32], dst: &mut [u8]) {
    assert_eq!(dst.len(), src.len() * 2, "f16 row length mismatch");
    let mut buf = [f16::ZERO; CHUNK];
    for (xs, bytes) in src.chunks(CHUNK).zip(dst.chunks_mut(2 * CHUNK)) {
        let h = &mut buf[..xs.len()];
        h.convert_from_f32_slice(xs);
        for (v, b) in h.iter().zip(bytes.chunks_exact_mut(2)) {
            b.copy_from_slice(&v.to_le_bytes());
        }
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
    fn slice_conversions_equal_element_conversions() {
        use crate::quant::block::f32_to_f16;
        // Every half but the NaNs, widened; an odd length leaves a partial chunk.
        let halves: Vec<u8> = (0..=u16::MAX)
            .filter(|b| !f16::from_bits(*b).is_nan())
            .flat_map(u16::to_le_bytes)
            .take(2 * 63_001)
            .collect();
        let mut wide = vec![0f32; halves.len() / 2];
        dequantize(&halves, &mut wide);
        for (x, b) in wide.iter().zip(halves.chunks_exact(2)) {
            assert_eq!(x.to_bits(), f16_to_f32([b[0], b[1]]).to_bits());
        }
        // Floats of every magnitude, ties and overflow included, rounded back.
        let mut s = 0x9e37_79b9u32;
        let xs: Vec<f32> = (0..10_007)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                f32::from_bits(s)
            })
            .filter(|x| !x.is_nan())
            .chain([65520.0, 65519.0, 1.0 + 1.0 / 2048.0, 5.960_464_5e-8, -0.0])
            .collect();
        let mut bytes = vec![0u8; 2 * xs.len()];
        quantize(&xs, &mut bytes);
        for (x, b) in xs.iter().zip(bytes.chunks_exact(2)) {
            assert_eq!([b[0], b[1]], f32_to_f16(*x), "{x}");
        }
    }

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
