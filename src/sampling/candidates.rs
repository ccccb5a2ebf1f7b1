//! The candidate list a sampler chain narrows down: token ids with their logits, optionally
//! sorted by logit, and the final weighted draw.

use super::Rng;

/// Token candidates and their logits.
#[derive(Clone, Debug)]
pub struct Candidates {
    pub ids: Vec<u32>,
    pub logits: Vec<f32>,
    /// True when `logits` is in descending order.
    pub sorted: bool,
}

impl Candidates {
    /// Every token of the vocabulary, unsorted.
    pub fn from_logits(logits: &[f32]) -> Candidates {
        Candidates {
            ids: (0..logits.len() as u32).collect(),
            logits: logits.to_vec(),
            sorted: false,
        }
    }

    /// Number of candidates left.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when no candidate is left.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Sorts by logit, highest first (ties keep the lower id first).
    pub fn sort(&mut self) {
        if self.sorted {
            return;
        }
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.sort_by(|&a, &b| {
            self.logits[b]
                .total_cmp(&self.logits[a])
                .then(self.ids[a].cmp(&self.ids[b]))
        });
        self.ids = order.iter().map(|&i| self.ids[i]).collect();
        self.logits = order.iter().map(|&i| self.logits[i]).collect();
        self.sorted = true;
    }

    /// Keeps the first `n` candidates (after sorting).
    pub fn truncate(&mut self, n: usize) {
        self.sort();
        self.ids.truncate(n.max(1));
        self.logits.truncate(n.max(1));
    }

    /// Softmax probabilities of the current candidates, in their current order.
    pub fn probs(&self) -> Vec<f32> {
        let max = self
            .logits
            .iter()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        let exps: Vec<f32> = self.logits.iter().map(|l| (l - max).exp()).collect();
        let sum: f32 = exps.iter().sum();
        exps.iter().map(|e| e / sum).collect()
    }

    /// The id with the highest logit (the lowest id among equals).
    pub fn argmax(&self) -> u32 {
        let mut best = 0;
        for i in 1..self.len() {
            if self.logits[i] > self.logits[best]
                || (self.logits[i] == self.logits[best] && self.ids[i] < self.ids[best])
            {
                best = i;
            }
        }
        self.ids[best]
    }

    /// Draws one id with probability proportional to softmax(logits).
    pub fn draw(&self, rng: &mut Rng) -> u32 {
        let probs = self.probs();
        let mut u = rng.next_f32();
        for (id, p) in self.ids.iter().zip(&probs) {
            if u < *p {
                return *id;
            }
            u -= p;
        }
        *self.ids.last().expect("draw from no candidates")
    }
}
