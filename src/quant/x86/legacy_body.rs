// Kernel bodies for the 32-element formats, included by `legacy.rs` once per instruction-set
// flavour. The including module provides `tf!` (adds that flavour's `#[target_feature]`) and
// `mul_sum_us8` (u8×i8 products, four per i32 lane). Each kernel dots one weight row with `R`
// activation rows, decoding every weight block once. Per activation row every block goes
// through one f32 accumulator vector, in ggml's order (its x86 `vec_dot` and tinyBLAS kernels
// do the same), so results match llama.cpp to the bit.
// The operation sequence per activation row does not depend on `R`, so every `R` gives the
// same bits.

tf! {
    /// Sums each row's accumulator lanes in ggml's order, adding `extra[r]`.
    #[inline]
    fn finish<const R: usize>(acc: &[__m256; R], extra: &[f32; R]) -> [f32; R] {
        std::array::from_fn(|r| hsum_f32_8(acc[r]) + extra[r])
    }

    pub(in crate::quant) fn dot_q4_0<const R: usize>(
        w: &[BlockQ4_0],
        a: [&[BlockQ8_0]; R],
    ) -> [f32; R] {
        let a = a.map(|a| &a[..w.len()]);
        let mut acc = [_mm256_setzero_ps(); R];
        macro_rules! step {
            ($i:expr) => {{
                let x = &w[$i];
                let qx = _mm256_sub_epi8(nibbles_32(&x.qs), _mm256_set1_epi8(8));
                let ax = _mm256_sign_epi8(qx, qx);
                let dx = f16(x.d);
                for r in 0..R {
                    let y = &a[r][$i];
                    let p = mul_sum_us8(ax, _mm256_sign_epi8(ld32i(&y.qs), qx));
                    let d = _mm256_set1_ps(dx * f16(y.d));
                    acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r]);
                }
            }};
        }
        for i in 0..w.len() {
            step!(i);
        }
        finish(&acc, &[0.0; R])
    }

    /// One accumulator and one running minimum term per row, as ggml's x86 kernel has: the
    /// float operations happen in llama.cpp's order (SmolLM2's Q4_1 is chaotic at the rounding
    /// level, so nothing else matches it token for token).
    pub(in crate::quant) fn dot_q4_1<const R: usize>(
        w: &[BlockQ4_1],
        a: [&[BlockQ8_1]; R],
    ) -> [f32; R] {
        let a = a.map(|a| &a[..w.len()]);
        let mut acc = [_mm256_setzero_ps(); R];
        let mut summs = [0f32; R];
        for (i, x) in w.iter().enumerate() {
            let qx = nibbles_32(&x.qs);
            let (dx, mx) = (f16(x.d), f16(x.m));
            for r in 0..R {
                let y = &a[r][i];
                summs[r] += mx * f16(y.s);
                let p = mul_sum_us8(qx, ld32i(&y.qs));
                let d = _mm256_set1_ps(dx * f16(y.d));
                acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r]);
            }
        }
        std::array::from_fn(|r| hsum_f32_8(acc[r]) + summs[r])
    }

    pub(in crate::quant) fn dot_q5_0<const R: usize>(
        w: &[BlockQ5_0],
        a: [&[BlockQ8_0]; R],
    ) -> [f32; R] {
        let a = a.map(|a| &a[..w.len()]);
        let mut acc = [_mm256_setzero_ps(); R];
        macro_rules! step {
            ($i:expr) => {{
                let x = &w[$i];
                // A clear fifth bit means q - 16 is negative: OR in 0xF0 to sign-extend.
                let hi = _mm256_andnot_si256(bits_to_bytes_32(x.qh), _mm256_set1_epi8(-16));
                let qx = _mm256_or_si256(nibbles_32(&x.qs), hi);
                let ax = _mm256_sign_epi8(qx, qx);
                let dx = f16(x.d);
                for r in 0..R {
                    let y = &a[r][$i];
                    let p = mul_sum_us8(ax, _mm256_sign_epi8(ld32i(&y.qs), qx));
                    let d = _mm256_set1_ps(dx * f16(y.d));
                    acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r]);
                }
            }};
        }
        for i in 0..w.len() {
            step!(i);
        }
        finish(&acc, &[0.0; R])
    }

    pub(in crate::quant) fn dot_q5_1<const R: usize>(
        w: &[BlockQ5_1],
        a: [&[BlockQ8_1]; R],
    ) -> [f32; R] {
        let a = a.map(|a| &a[..w.len()]);
        let mut acc = [_mm256_setzero_ps(); R];
        let mut summs = [0f32; R];
        macro_rules! step {
            ($i:expr) => {{
                let x = &w[$i];
                let hi = _mm256_and_si256(bits_to_bytes_32(x.qh), _mm256_set1_epi8(0x10));
                let qx = _mm256_or_si256(nibbles_32(&x.qs), hi);
                let (dx, mx) = (f16(x.d), f16(x.m));
                for r in 0..R {
                    let y = &a[r][$i];
                    summs[r] += mx * f16(y.s);
                    let p = mul_sum_us8(qx, ld32i(&y.qs));
                    let d = _mm256_set1_ps(dx * f16(y.d));
                    acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r]);
                }
            }};
        }
        for i in 0..w.len() {
            step!(i);
        }
        finish(&acc, &summs)
    }

    pub(in crate::quant) fn dot_q8_0<const R: usize>(
        w: &[BlockQ8_0],
        a: [&[BlockQ8_0]; R],
    ) -> [f32; R] {
        let a = a.map(|a| &a[..w.len()]);
        let mut acc = [_mm256_setzero_ps(); R];
        macro_rules! step {
            ($i:expr) => {{
                let x = &w[$i];
                let qx = ld32i(&x.qs);
                let ax = _mm256_sign_epi8(qx, qx);
                let dx = f16(x.d);
                for r in 0..R {
                    let y = &a[r][$i];
                    let p = mul_sum_us8(ax, _mm256_sign_epi8(ld32i(&y.qs), qx));
                    let d = _mm256_set1_ps(dx * f16(y.d));
                    acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r]);
                }
            }};
        }
        for i in 0..w.len() {
            step!(i);
        }
        finish(&acc, &[0.0; R])
    }
}
