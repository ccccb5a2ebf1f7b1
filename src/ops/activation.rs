//! Gated feed-forward activations: SiLU (SwiGLU) and GELU (GeGLU). GELU uses ggml's method, a
//! table indexed by the input rounded to f16 whose entries are themselves f16, so results match
//! llama.cpp's CPU path.

use crate::cpu::Isa;
use crate::ops::expf::expf_ggml;
use half::f16;
use std::sync::OnceLock;

/// `gate[i] = silu(gate[i]) * up[i]`, with ggml's vectorised `expf` approximation (its
/// AVX-512 form, whose bits every variant reproduces), so results match llama.cpp's.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    swiglu_with(crate::cpu::isa(), gate, up)
}

/// [`swiglu`] with the kernels of `isa` (which this CPU must support).
pub fn swiglu_with(isa: Isa, gate: &mut [f32], up: &[f32]) {
    let n = gate.len().min(up.len());
    #[allow(unused_mut)]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    match isa {
        // SAFETY: the caller guarantees the CPU supports `isa`.
        Isa::Avx512 => done = unsafe { silu_x86::swiglu16(&mut gate[..n], &up[..n]) },
        // SAFETY: as above.
        Isa::Avx2 => done = unsafe { silu_x86::swiglu8(&mut gate[..n], &up[..n]) },
        _ => {}
    }
    let _ = isa;
    for (g, u) in gate[done..n].iter_mut().zip(&up[done..n]) {
        *g = *g / (1.0 + expf_ggml(-*g)) * *u;
    }
}

#[cfg(target_arch = "x86_64")]
mod silu_x86 {
    use crate::ops::expf::x86::{v_expf, v_expf8};
    use std::arch::x86_64::*;

    /// SwiGLU over the leading multiple of 16 elements; returns how many were done.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX-512DQ.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn swiglu16(gate: &mut [f32], up: &[f32]) -> usize {
        let n = gate.len().min(up.len()) / 16 * 16;
        let one = _mm512_set1_ps(1.0);
        for (g, u) in gate[..n].chunks_exact_mut(16).zip(up.chunks_exact(16)) {
            // SAFETY: both chunks hold 16 floats; unaligned loads and store.
            unsafe {
                let x = _mm512_loadu_ps(g.as_ptr());
                let e = v_expf(_mm512_sub_ps(_mm512_setzero_ps(), x));
                let silu = _mm512_div_ps(x, _mm512_add_ps(one, e));
                _mm512_storeu_ps(
                    g.as_mut_ptr(),
                    _mm512_mul_ps(silu, _mm512_loadu_ps(u.as_ptr())),
                );
            }
        }
        n
    }

    /// SwiGLU over the leading multiple of 8 elements, with [`swiglu16`]'s bits; returns how
    /// many were done.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn swiglu8(gate: &mut [f32], up: &[f32]) -> usize {
        let n = gate.len().min(up.len()) / 8 * 8;
        let one = _mm256_set1_ps(1.0);
        for (g, u) in gate[..n].chunks_exact_mut(8).zip(up.chunks_exact(8)) {
            // SAFETY: both chunks hold 8 floats; unaligned loads and store.
            unsafe {
                let x = _mm256_loadu_ps(g.as_ptr());
                let e = v_expf8(_mm256_sub_ps(_mm256_setzero_ps(), x));
                let silu = _mm256_div_ps(x, _mm256_add_ps(one, e));
                _mm256_storeu_ps(
                    g.as_mut_ptr(),
                    _mm256_mul_ps(silu, _mm256_loadu_ps(u.as_ptr())),
                );
            }
        }
        n
    }
}

/// `gate[i] = gelu(gate[i]) * up[i]`, GELU in its tanh form.
pub fn geglu(gate: &mut [f32], up: &[f32]) {
    let table = gelu_table();
    for (g, u) in gate.iter_mut().zip(up) {
        let x = *g;
        let y = if x <= -10.0 {
            0.0
        } else if x >= 10.0 {
            x
        } else {
            table[f16::from_f32(x).to_bits() as usize]
        };
        *g = y * *u;
    }
}

/// GELU (tanh approximation) in f32.
pub fn gelu(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    const COEF_A: f32 = 0.044715;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * x * (1.0 + COEF_A * x * x)).tanh())
}

fn gelu_table() -> &'static [f32] {
    static TABLE: OnceLock<Vec<f32>> = OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|bits| {
                let x = f16::from_bits(bits).to_f32();
                f16::from_f32(gelu(x)).to_f32()
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silu_values() {
        let mut g = vec![0.0, 1.0, -1.0];
        swiglu(&mut g, &[1.0, 2.0, 1.0]);
        assert_eq!(g[0], 0.0);
        assert!((g[1] - 2.0 * 0.731_058_6).abs() < 1e-6);
        assert!((g[2] + 0.268_941_4).abs() < 1e-6);
    }

    #[test]
    fn every_variant_gives_the_same_bits() {
        let gate: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.037).collect();
        let up: Vec<f32> = (0..1000).map(|i| 1.0 + i as f32 * 0.01).collect();
        let run = |isa| {
            let mut g = gate.clone();
            swiglu_with(isa, &mut g, &up);
            g.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        };
        let want = run(Isa::Scalar);
        for isa in crate::cpu::available() {
            assert_eq!(run(isa), want, "{isa:?}");
        }
    }

    #[test]
    fn gelu_values_near_exact() {
        let mut g = vec![1.0, -0.5, 20.0, -20.0];
        geglu(&mut g, &[1.0; 4]);
        assert!((g[0] - 0.841_192).abs() < 1e-3);
        assert!((g[1] + 0.154_286).abs() < 1e-3);
        assert_eq!(g[2], 20.0);
        assert_eq!(g[3], 0.0);
    }
}
