//! ggml's vectorised `expf` (`ggml_v_expf`, its AVX-512 form): a degree-5 polynomial after
//! range reduction, used wherever llama.cpp uses it (SiLU, the tiled attention's softmax) so
//! results match its bits. The AVX2 form and a scalar twin compute the same values (the final
//! `2ⁿ` scaling rounded once, as `vscalefps` does), so every CPU variant gives the same bits.

/// The scalar twin of [`x86::v_expf`]: the same operations, rounded the same way.
#[inline]
pub fn expf_ggml(x: f32) -> f32 {
    let c = f32::from_bits;
    let r = c(0x4b40_0000);
    let z = x.mul_add(c(0x3fb8_aa3b), r);
    let n = z - r;
    // fnmadd(a, b, c) = c − a·b, fused.
    let b = (-n).mul_add(c(0x35bf_be8e), (-n).mul_add(c(0x3f31_7200), x));
    let u = b * b;
    let j = c(0x3c07_2010)
        .mul_add(b, c(0x3d2b_9f17))
        .mul_add(u, c(0x3e2a_af33).mul_add(b, c(0x3eff_fedb)));
    let j = j.mul_add(u, c(0x3f7f_fff6).mul_add(b, 1.0));
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    // `vscalefps`: j · 2ⁿ rounded once (exact in f64, then one rounding to f32).
    let pow2 = f64::from_bits(((n as i64 + 1023) as u64) << 52);
    (j as f64 * pow2) as f32
}

#[cfg(target_arch = "x86_64")]
pub mod x86 {
    use std::arch::x86_64::*;

    /// `expf` of sixteen lanes, as ggml's AVX-512 `ggml_v_expf`.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX-512DQ.
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    pub fn v_expf(x: __m512) -> __m512 {
        let c = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
        let r = c(0x4b40_0000);
        let z = _mm512_fmadd_ps(x, c(0x3fb8_aa3b), r);
        let n = _mm512_sub_ps(z, r);
        let b = _mm512_fnmadd_ps(n, c(0x35bf_be8e), _mm512_fnmadd_ps(n, c(0x3f31_7200), x));
        let d = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
        let u = _mm512_mul_ps(b, b);
        let j = _mm512_fmadd_ps(
            _mm512_fmadd_ps(
                _mm512_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
                u,
                _mm512_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
            ),
            u,
            _mm512_fmadd_ps(c(0x3f7f_fff6), b, _mm512_set1_ps(1.0)),
        );
        let res = _mm512_scalef_ps(j, n);
        if d == 0 {
            return res;
        }
        let zero = _mm512_setzero_ps();
        let alt = _mm512_mask_blend_ps(
            _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, zero),
            _mm512_set1_ps(f32::INFINITY),
            zero,
        );
        _mm512_mask_blend_ps(d, res, alt)
    }

    /// `expf` of eight lanes with [`v_expf`]'s bits, on AVX2 and FMA. `vscalefps` has no
    /// AVX2 form: `j · 2ⁿ` is one exact multiply when `2ⁿ` is a normal float, and is done in
    /// f64 (exact, then one rounding) when some lane needs a subnormal or huge scale.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn v_expf8(x: __m256) -> __m256 {
        let c = |bits: u32| _mm256_set1_ps(f32::from_bits(bits));
        let r = c(0x4b40_0000);
        let z = _mm256_fmadd_ps(x, c(0x3fb8_aa3b), r);
        let n = _mm256_sub_ps(z, r);
        let b = _mm256_fnmadd_ps(n, c(0x35bf_be8e), _mm256_fnmadd_ps(n, c(0x3f31_7200), x));
        let abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0), n);
        let u = _mm256_mul_ps(b, b);
        let j = _mm256_fmadd_ps(
            _mm256_fmadd_ps(
                _mm256_fmadd_ps(c(0x3c07_2010), b, c(0x3d2b_9f17)),
                u,
                _mm256_fmadd_ps(c(0x3e2a_af33), b, c(0x3eff_fedb)),
            ),
            u,
            _mm256_fmadd_ps(c(0x3f7f_fff6), b, _mm256_set1_ps(1.0)),
        );
        let ni = _mm256_cvtps_epi32(n);
        let normal = _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_GE_OQ>(n, _mm256_set1_ps(-126.0)),
            _mm256_cmp_ps::<_CMP_LE_OQ>(n, _mm256_set1_ps(127.0)),
        );
        let res = if _mm256_movemask_ps(normal) == 0xff {
            let pow2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(ni, _mm256_set1_epi32(127)));
            _mm256_mul_ps(j, _mm256_castsi256_ps(pow2))
        } else {
            // Lanes with |n| > 192 get their pow2 from a clamped exponent; they are replaced
            // below anyway.
            let nc = _mm256_max_epi32(
                _mm256_min_epi32(ni, _mm256_set1_epi32(1000)),
                _mm256_set1_epi32(-1000),
            );
            let scale = |half: __m128i, jh: __m128| {
                let e = _mm256_add_epi64(_mm256_cvtepi32_epi64(half), _mm256_set1_epi64x(1023));
                let p = _mm256_castsi256_pd(_mm256_slli_epi64::<52>(e));
                _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(jh), p))
            };
            let lo = scale(_mm256_castsi256_si128(nc), _mm256_castps256_ps128(j));
            let hi = scale(
                _mm256_extracti128_si256::<1>(nc),
                _mm256_extractf128_ps::<1>(j),
            );
            _mm256_insertf128_ps::<1>(_mm256_castps128_ps256(lo), hi)
        };
        let big = _mm256_cmp_ps::<_CMP_GT_OQ>(abs_n, _mm256_set1_ps(192.0));
        if _mm256_movemask_ps(big) == 0 {
            return res;
        }
        let zero = _mm256_setzero_ps();
        let alt = _mm256_blendv_ps(
            _mm256_set1_ps(f32::INFINITY),
            zero,
            _mm256_cmp_ps::<_CMP_LE_OQ>(n, zero),
        );
        _mm256_blendv_ps(res, alt, big)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_to_libm() {
        for i in -2000..=2000 {
            let x = i as f32 * 0.01;
            let (got, want) = (expf_ggml(x), x.exp());
            assert!(((got - want) / want).abs() < 2e-6, "{x}: {got} vs {want}");
        }
        assert_eq!(expf_ggml(f32::NEG_INFINITY), 0.0);
        assert_eq!(expf_ggml(-1000.0), 0.0);
        assert_eq!(expf_ggml(1000.0), f32::INFINITY);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn scalar_twin_equals_the_vector_form() {
        use crate::cpu::{supports, Isa};
        use std::arch::x86_64::*;
        let mut xs: Vec<f32> = (-3000..3000).map(|i| i as f32 * 0.037).collect();
        xs.extend([
            f32::NEG_INFINITY,
            -150.0,
            -100.5,
            -87.9,
            0.0,
            -0.0,
            88.5,
            200.0,
        ]);
        xs.extend((0..64).map(|i| -(i as f32) * 1.7 - 100.0));
        while !xs.len().is_multiple_of(16) {
            xs.push(1.0);
        }
        for chunk in xs.chunks_exact(16) {
            let mut out = [0f32; 16];
            if supports(Isa::Avx512) {
                // SAFETY: AVX-512F/DQ confirmed above; 16 floats in and out, unaligned.
                unsafe {
                    let v = x86::v_expf(_mm512_loadu_ps(chunk.as_ptr()));
                    _mm512_storeu_ps(out.as_mut_ptr(), v);
                }
                for (x, got) in chunk.iter().zip(out) {
                    assert_eq!(got.to_bits(), expf_ggml(*x).to_bits(), "avx512 at {x}");
                }
            }
            if supports(Isa::Avx2) {
                for h in 0..2 {
                    // SAFETY: AVX2/FMA confirmed above; 8 floats in and out, unaligned.
                    unsafe {
                        let v = x86::v_expf8(_mm256_loadu_ps(chunk[8 * h..].as_ptr()));
                        _mm256_storeu_ps(out[8 * h..].as_mut_ptr(), v);
                    }
                }
                for (x, got) in chunk.iter().zip(out) {
                    assert_eq!(got.to_bits(), expf_ggml(*x).to_bits(), "avx2 at {x}");
                }
            }
        }
    }
}
