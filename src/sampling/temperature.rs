//! Temperature: divide logits by t (t < 1 sharpens, t > 1 flattens).

use super::Candidates;

/// Scales logits by `1 / t` (callers handle `t <= 0` as greedy).
pub fn apply(c: &mut Candidates, t: f32) {
    c.logits.iter_mut().for_each(|l| *l /= t);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales() {
        let mut c = Candidates::from_logits(&[1.0, -2.0]);
        apply(&mut c, 0.5);
        assert_eq!(c.logits, vec![2.0, -4.0]);
    }
}
