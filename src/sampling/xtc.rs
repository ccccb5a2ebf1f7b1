//! XTC (exclude top choices): with some probability, remove every candidate above a
//! probability threshold except the least likely of them, to steer away from the most
//! predictable continuations.

use super::{Candidates, Rng};

/// XTC's two settings; `probability <= 0` or `threshold > 0.5` disables it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Xtc {
    pub probability: f32,
    pub threshold: f32,
}

/// Applies XTC, drawing its coin from `rng`.
pub fn apply(c: &mut Candidates, x: Xtc, rng: &mut Rng) {
    if x.probability <= 0.0 || x.threshold > 0.5 || c.len() < 2 {
        return;
    }
    if rng.next_f32() > x.probability {
        return;
    }
    c.sort();
    let probs = c.probs();
    let above = probs.iter().take_while(|&&p| p >= x.threshold).count();
    if above >= 2 {
        c.items.drain(..above - 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_top_choices_but_the_last() {
        // probs 0.4, 0.3, 0.2, 0.1; threshold 0.25: 0.4 and 0.3 are above, 0.4 goes.
        let logits = [0.4f32.ln(), 0.3f32.ln(), 0.2f32.ln(), 0.1f32.ln()];
        let on = Xtc {
            probability: 1.0,
            threshold: 0.25,
        };
        let mut c = Candidates::from_logits(&logits);
        apply(&mut c, on, &mut Rng::new(1));
        assert_eq!(c.ids(), vec![1, 2, 3]);
        // One candidate above the threshold: nothing to exclude.
        let mut c = Candidates::from_logits(&logits);
        let one = Xtc {
            threshold: 0.35,
            ..on
        };
        apply(&mut c, one, &mut Rng::new(1));
        assert_eq!(c.len(), 4);
        let mut c = Candidates::from_logits(&logits);
        let off = Xtc {
            probability: 0.0,
            ..on
        };
        apply(&mut c, off, &mut Rng::new(1));
        assert_eq!(c.len(), 4);
    }
}
