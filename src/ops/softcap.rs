//! Logit soft-capping, `cap · tanh(x / cap)` (Gemma 2's attention scores and final logits), in
//! ggml's order: the input times a multiplier computed once (1/cap, or the attention scale
//! divided by the cap), `tanhf`, times the cap.

/// `cap · tanh(x · mul)`.
#[inline(always)]
pub fn softcap(x: f32, mul: f32, cap: f32) -> f32 {
    cap * (x * mul).tanh()
}

/// Soft-caps every value of `v` at `cap`.
pub fn softcap_all(v: &mut [f32], cap: f32) {
    let inv = 1.0 / cap;
    v.iter_mut().for_each(|x| *x = softcap(*x, inv, cap));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_large_values_and_keeps_small_ones() {
        let mut v = [0.01f32, 100.0, -100.0];
        softcap_all(&mut v, 30.0);
        assert!((v[0] - 0.01).abs() < 1e-6);
        assert!(v[1] < 30.0 && v[1] > 29.0);
        assert!(v[2] > -30.0 && v[2] < -29.0);
    }
}
