//! Min-p: drop candidates whose probability is below `p` times that of the most likely one.

use super::Candidates;

/// Keeps candidates with `prob >= p * max_prob` (in their current order); `p <= 0` keeps all.
pub fn apply(c: &mut Candidates, p: f32) {
    if p <= 0.0 || c.len() <= 1 {
        return;
    }
    let threshold = c.max_logit() + p.ln();
    c.items.retain(|x| x.logit >= threshold);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_unlikely() {
        // relative probabilities 1, 0.5, 0.1
        let mut c = Candidates::from_logits(&[0.0, 0.5f32.ln(), 0.1f32.ln()]);
        apply(&mut c, 0.3);
        assert_eq!(c.ids(), vec![0, 1]);
    }
}
