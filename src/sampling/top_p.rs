//! Top-p (nucleus): keep the smallest set of most likely candidates whose probability mass
//! reaches p.

use super::Candidates;

/// Keeps candidates until their cumulative probability reaches `p`; `p >= 1` keeps all.
pub fn apply(c: &mut Candidates, p: f32) {
    if p >= 1.0 || c.len() <= 1 {
        return;
    }
    c.sort();
    let probs = c.probs();
    let mut cum = 0.0;
    let mut keep = c.len();
    for (i, pr) in probs.iter().enumerate() {
        cum += pr;
        if cum >= p {
            keep = i + 1;
            break;
        }
    }
    c.truncate(keep);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_mass() {
        // probabilities 0.25, 0.5, 0.25 (logits 0, ln 2, 0)
        let mut c = Candidates::from_logits(&[0.0, 2f32.ln(), 0.0]);
        apply(&mut c, 0.6);
        assert_eq!(c.ids(), vec![1, 0]);
        let mut c = Candidates::from_logits(&[0.0, 2f32.ln(), 0.0]);
        apply(&mut c, 0.5);
        assert_eq!(c.ids(), vec![1]);
    }
}
