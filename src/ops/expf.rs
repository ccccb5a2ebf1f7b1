//! ggml's vectorised `expf` (`ggml_v_expf`, its AVX-512 form): a degree-5 polynomial after
//! range reduction, used wherever llama.cpp uses it (SiLU, the tiled attention's softmax) so
//! results match its bits. A scalar twin computes the same values one at a time, for the
//! portable paths and for tests.

/// The scalar twin of [`x86::v_expf`]: the same operations, rounded the same way.
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
    (j as f64 * 2f64.powi(n as i32)) as f32
}

#[cfg(target_arch = "x86_64")]
pub mod x86 {
    use std::arch::x86_64::*;

    /// Whether [`v_expf`] can run here.
    pub fn available() -> bool {
        use std::sync::OnceLock;
        static OK: OnceLock<bool> = OnceLock::new();
        *OK.get_or_init(|| {
            is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512dq")
        })
    }

    /// `expf` of sixteen lanes, as ggml's AVX-512 `ggml_v_expf`.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX-512DQ ([`available`]).
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
        use std::arch::x86_64::*;
        if !x86::available() {
            return;
        }
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
            // SAFETY: AVX-512F/DQ confirmed above; 16 floats in and out, unaligned.
            unsafe {
                let v = x86::v_expf(_mm512_loadu_ps(chunk.as_ptr()));
                _mm512_storeu_ps(out.as_mut_ptr(), v);
            }
            for (x, got) in chunk.iter().zip(out) {
                assert_eq!(got.to_bits(), expf_ggml(*x).to_bits(), "at {x}");
            }
        }
    }
}
