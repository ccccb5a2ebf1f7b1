//! The candidate list a sampler chain narrows down: token ids with their logits, optionally
//! sorted by logit, softmax probabilities, and the final weighted draw.

use super::Rng;

/// One token still in the running.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub id: u32,
    pub logit: f32,
}

/// Token candidates and their logits.
#[derive(Clone, Debug)]
pub struct Candidates {
    pub items: Vec<Candidate>,
    /// True when `items` is in descending order of logit.
    pub sorted: bool,
}

/// Highest logit first; among equal logits the lower id first.
fn by_logit_desc(a: &Candidate, b: &Candidate) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

impl Candidates {
    /// Every token of the vocabulary, unsorted.
    pub fn from_logits(logits: &[f32]) -> Candidates {
        Candidates {
            items: logits
                .iter()
                .enumerate()
                .map(|(i, &logit)| Candidate {
                    id: i as u32,
                    logit,
                })
                .collect(),
            sorted: false,
        }
    }

    /// Number of candidates left.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when no candidate is left.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The ids, in the current order.
    pub fn ids(&self) -> Vec<u32> {
        self.items.iter().map(|c| c.id).collect()
    }

    /// The logits, in the current order.
    pub fn logits(&self) -> Vec<f32> {
        self.items.iter().map(|c| c.logit).collect()
    }

    /// Sorts by logit, highest first (ties keep the lower id first).
    pub fn sort(&mut self) {
        if !self.sorted {
            self.items.sort_unstable_by(by_logit_desc);
            self.sorted = true;
        }
    }

    /// Keeps the `n` highest logits (at least one), sorted, without sorting the whole list.
    pub fn truncate(&mut self, n: usize) {
        let n = n.max(1);
        if !self.sorted && n < self.items.len() {
            self.items.select_nth_unstable_by(n - 1, by_logit_desc);
            self.items.truncate(n);
        }
        self.sort();
        self.items.truncate(n);
    }

    /// Drops candidates whose logit is `-inf` (masked by a bias or a grammar), keeping one.
    pub fn drop_masked(&mut self) {
        if self.items.iter().any(|c| c.logit == f32::NEG_INFINITY) {
            let keep: Vec<Candidate> = self
                .items
                .iter()
                .copied()
                .filter(|c| c.logit != f32::NEG_INFINITY)
                .collect();
            if !keep.is_empty() {
                self.items = keep;
            }
        }
    }

    /// The highest logit.
    pub fn max_logit(&self) -> f32 {
        self.items
            .iter()
            .map(|c| c.logit)
            .fold(f32::NEG_INFINITY, f32::max)
    }

    /// Softmax probabilities of the current candidates, in their current order.
    pub fn probs(&self) -> Vec<f32> {
        let max = self.max_logit();
        if max == f32::NEG_INFINITY {
            let n = self.len().max(1) as f32;
            return vec![1.0 / n; self.len()];
        }
        let exps: Vec<f32> = self
            .items
            .iter()
            .map(|c| crate::ops::mathf::expf(c.logit - max))
            .collect();
        let sum: f32 = exps.iter().sum();
        exps.iter().map(|e| e / sum).collect()
    }

    /// The index of the highest logit (the lowest id among equals).
    pub fn argmax_index(&self) -> usize {
        let mut best = 0;
        for (i, c) in self.items.iter().enumerate().skip(1) {
            let b = &self.items[best];
            if c.logit > b.logit || (c.logit == b.logit && c.id < b.id) {
                best = i;
            }
        }
        best
    }

    /// The id with the highest logit (the lowest id among equals).
    pub fn argmax(&self) -> u32 {
        self.items[self.argmax_index()].id
    }

    /// Draws the index of one candidate with probability proportional to softmax(logits).
    pub fn draw_index(&self, rng: &mut Rng) -> usize {
        let probs = self.probs();
        let mut u = rng.next_f32();
        for (i, p) in probs.iter().enumerate() {
            if u < *p {
                return i;
            }
            u -= p;
        }
        // Rounding left a sliver of mass: the last candidate with any probability.
        probs.iter().rposition(|&p| p > 0.0).unwrap_or(0)
    }

    /// Draws one id with probability proportional to softmax(logits).
    pub fn draw(&self, rng: &mut Rng) -> u32 {
        self.items[self.draw_index(rng)].id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_keeps_best_sorted() {
        let mut c = Candidates::from_logits(&[0.0, 3.0, 1.0, 3.0, 2.0]);
        c.truncate(3);
        assert_eq!(c.ids(), vec![1, 3, 4]);
        assert!(c.sorted);
    }

    #[test]
    fn probs_sum_to_one_and_draw_follows_them() {
        let c = Candidates::from_logits(&[0.0, 2f32.ln(), f32::NEG_INFINITY]);
        let p = c.probs();
        assert!((p[0] - 1.0 / 3.0).abs() < 1e-6 && (p[1] - 2.0 / 3.0).abs() < 1e-6);
        assert_eq!(p[2], 0.0);
        let mut rng = Rng::new(3);
        let mut counts = [0usize; 3];
        for _ in 0..3000 {
            counts[c.draw(&mut rng) as usize] += 1;
        }
        assert_eq!(counts[2], 0);
        assert!((1700..2300).contains(&counts[1]), "{counts:?}");
    }
}
