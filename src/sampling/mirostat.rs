//! Mirostat v1 and v2: samplers that steer the surprise (`-log2 p`) of chosen tokens towards a
//! target `tau`, keeping a running bound `mu` (starting at `2 * tau`) updated by `eta` after
//! every choice.

use super::{Candidates, Rng};

/// Mirostat's settings and running state.
#[derive(Clone, Debug, PartialEq)]
pub struct Mirostat {
    /// 1 or 2.
    pub version: u8,
    pub tau: f32,
    pub eta: f32,
    pub mu: f32,
}

/// Tokens used to estimate the Zipf exponent in v1.
const M: usize = 100;

impl Mirostat {
    pub fn new(version: u8, tau: f32, eta: f32) -> Mirostat {
        Mirostat {
            version,
            tau,
            eta,
            mu: 2.0 * tau,
        }
    }

    /// Narrows `c`, draws a token and updates `mu` from its surprise.
    pub fn sample(&mut self, c: &mut Candidates, n_vocab: usize, rng: &mut Rng) -> u32 {
        c.sort();
        if self.version == 1 {
            self.truncate_v1(c, n_vocab);
        } else {
            let probs = c.probs();
            let keep = probs.iter().take_while(|&&p| -p.log2() <= self.mu).count();
            c.truncate(keep.max(1));
        }
        let probs = c.probs();
        let i = c.draw_index(rng);
        let surprise = -probs[i].log2();
        self.mu -= self.eta * (surprise - self.tau);
        c.items[i].id
    }

    /// v1: estimates the Zipf exponent `s` from the top probabilities, then keeps the `k`
    /// tokens that make the expected surprise `mu`.
    fn truncate_v1(&self, c: &mut Candidates, n_vocab: usize) {
        let probs = c.probs();
        let (mut sum_tb, mut sum_tt) = (0.0f32, 0.0f32);
        for i in 0..(M - 1).min(probs.len().saturating_sub(1)) {
            let t = ((i + 2) as f32 / (i + 1) as f32).ln();
            let b = (probs[i] / probs[i + 1]).ln();
            sum_tb += t * b;
            sum_tt += t * t;
        }
        let s_hat = sum_tb / sum_tt;
        let eps = s_hat - 1.0;
        let k =
            ((eps * 2f32.powf(self.mu)) / (1.0 - (n_vocab as f32).powf(-eps))).powf(1.0 / s_hat);
        let k = if k.is_finite() && k >= 1.0 {
            k as usize
        } else {
            1
        };
        c.truncate(k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_truncates_by_surprise_and_updates_mu() {
        // probs 0.5, 0.25, 0.125, 0.125: surprises 1, 2, 3, 3 bits. mu = 2*tau = 2.
        let logits = [0.5f32.ln(), 0.25f32.ln(), 0.125f32.ln(), 0.125f32.ln()];
        let mut m = Mirostat::new(2, 1.0, 0.5);
        let mut c = Candidates::from_logits(&logits);
        let id = m.sample(&mut c, 4, &mut Rng::new(9));
        assert_eq!(c.ids(), vec![0, 1]);
        // Renormalised: 2/3 and 1/3; the update is mu -= eta * (surprise - tau).
        let surprise = if id == 0 {
            -(2.0f32 / 3.0).log2()
        } else {
            3f32.log2()
        };
        assert!((m.mu - (2.0 - 0.5 * (surprise - 1.0))).abs() < 1e-5);
    }

    #[test]
    fn v1_keeps_more_tokens_when_mu_is_high() {
        let logits: Vec<f32> = (1..=200).map(|r| -(r as f32).ln()).collect(); // Zipf, s = 1.0x
        let kept = |mu: f32| {
            let mut m = Mirostat::new(1, 3.0, 0.1);
            m.mu = mu;
            let mut c = Candidates::from_logits(&logits);
            m.truncate_v1(&mut c, logits.len());
            c.len()
        };
        assert!(kept(2.0) < kept(6.0), "{} {}", kept(2.0), kept(6.0));
        assert!(kept(0.1) >= 1);
    }
}
