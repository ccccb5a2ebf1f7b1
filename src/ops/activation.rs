//! Gated feed-forward activations: SiLU (SwiGLU) and GELU (GeGLU). GELU uses ggml's method, a
//! table indexed by the input rounded to f16 whose entries are themselves f16, so results match
//! llama.cpp's CPU path.

use half::f16;
use std::sync::OnceLock;

/// `gate[i] = silu(gate[i]) * up[i]`.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * *u;
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
