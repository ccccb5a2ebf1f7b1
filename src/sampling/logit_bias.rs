//! Logit bias: fixed amounts added to chosen tokens' logits before anything else (`-inf` bans a
//! token). llama.cpp's `--logit-bias ID(+/-)BIAS` and the API's `logit_bias`.

/// Adds each `(id, bias)` to that token's logit; ids outside the vocabulary are ignored.
pub fn apply_to_logits(logits: &mut [f32], biases: &[(u32, f32)]) {
    for &(id, bias) in biases {
        if let Some(l) = logits.get_mut(id as usize) {
            *l += bias;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_and_bans() {
        let mut l = vec![1.0, 2.0, 3.0];
        apply_to_logits(
            &mut l,
            &[(0, 0.5), (2, f32::NEG_INFINITY), (1, -1.0), (9, 1.0)],
        );
        assert_eq!(l, vec![1.5, 1.0, f32::NEG_INFINITY]);
    }
}
