//! Gated feed-forward activations: SiLU (SwiGLU) and GELU (GeGLU). GELU uses ggml's method, a
//! table indexed by the input rounded to f16 whose entries are themselves f16, so results match
//! llama.cpp's CPU path.

use half::f16;
use std::sync::OnceLock;

/// `gate[i] = silu(gate[i]) * up[i]`, with ggml's vectorised `expf` approximation (its
/// AVX-512 form) wherever the CPU can compute it exactly, so results match llama.cpp's bits.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if silu_x86::available() {
        // SAFETY: `available()` confirmed AVX-512F/DQ at run time.
        let done = unsafe { silu_x86::swiglu16(gate, up) };
        swiglu_scalar(&mut gate[done..], &up[done..]);
        return;
    }
    swiglu_scalar(gate, up);
}

fn swiglu_scalar(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * *u;
    }
}

#[cfg(target_arch = "x86_64")]
mod silu_x86 {
    pub(super) use crate::ops::expf::x86::available;
    use crate::ops::expf::x86::v_expf;
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
    fn gelu_values_near_exact() {
        let mut g = vec![1.0, -0.5, 20.0, -20.0];
        geglu(&mut g, &[1.0; 4]);
        assert!((g[0] - 0.841_192).abs() < 1e-3);
        assert!((g[1] + 0.154_286).abs() < 1e-3);
        assert_eq!(g[2], 20.0);
        assert_eq!(g[3], 0.0);
    }
}
