//! Speculative decoding: cheap guesses at the next tokens (an n-gram lookup in the context, a
//! smaller draft model, or the target's own first layers) checked by the target in one batched
//! forward pass. Verification (`Session::generate_with_drafts`, and the server's scheduler)
//! samples the target at every drafted position with the whole sampler chain and keeps drafted
//! tokens while they equal what it sampled, as llama.cpp does: every emitted token is a genuine
//! sample of the target, so output follows the target's distribution exactly, and greedy output
//! is the same as without speculation.

pub mod draft_model;
pub mod ngram;
pub mod setup;

/// A source of draft tokens.
pub trait Drafter {
    /// Up to `max` tokens guessed to follow `history` (the tokens fed so far) and `last` (the
    /// token just sampled). Empty when it has no guess.
    fn draft(&mut self, history: &[u32], last: u32, max: usize) -> Vec<u32>;
}

/// How many tokens to draft, and from which sources (tried in order; the first non-empty draft
/// is used).
pub struct Speculator<'a> {
    drafters: Vec<Box<dyn Drafter + Send + 'a>>,
    /// Most tokens drafted per step.
    pub n_max: usize,
    /// Drafts shorter than this are dropped (the step decodes one token instead).
    pub n_min: usize,
    pub stats: SpecStats,
}

/// Counters for `--verbose`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Target forward passes that verified a draft.
    pub steps: usize,
    /// Tokens proposed.
    pub drafted: usize,
    /// Proposed tokens the target agreed with.
    pub accepted: usize,
}

impl<'a> Speculator<'a> {
    pub fn new(drafters: Vec<Box<dyn Drafter + Send + 'a>>, n_max: usize, n_min: usize) -> Self {
        Speculator {
            drafters,
            n_max,
            n_min,
            stats: SpecStats::default(),
        }
    }

    /// A draft of at most `room` tokens to follow `history` and `last`.
    pub fn draft(&mut self, history: &[u32], last: u32, room: usize) -> Vec<u32> {
        let max = self.n_max.min(room);
        if max == 0 || max < self.n_min {
            return Vec::new();
        }
        for d in self.drafters.iter_mut() {
            let mut draft = d.draft(history, last, max);
            draft.truncate(max);
            if !draft.is_empty() {
                if draft.len() < self.n_min {
                    return Vec::new();
                }
                return draft;
            }
        }
        Vec::new()
    }

    /// One line for `--verbose`, in llama.cpp's terms.
    pub fn summary(&self) -> String {
        let s = &self.stats;
        let rate = if s.drafted == 0 {
            0.0
        } else {
            100.0 * s.accepted as f64 / s.drafted as f64
        };
        format!(
            "speculative: {} verification passes, {} tokens drafted, {} accepted ({rate:.1}%)",
            s.steps, s.drafted, s.accepted
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Vec<u32>);
    impl Drafter for Fixed {
        fn draft(&mut self, _: &[u32], _: u32, _: usize) -> Vec<u32> {
            self.0.clone()
        }
    }

    #[test]
    fn first_non_empty_draft_wins_and_is_capped() {
        let mut s = Speculator::new(
            vec![
                Box::new(Fixed(vec![])),
                Box::new(Fixed(vec![1, 2, 3, 4])),
                Box::new(Fixed(vec![9])),
            ],
            3,
            0,
        );
        assert_eq!(s.draft(&[], 0, 10), vec![1, 2, 3]);
        assert_eq!(s.draft(&[], 0, 2), vec![1, 2]);
        assert_eq!(s.draft(&[], 0, 0), Vec::<u32>::new());
    }

    #[test]
    fn drafts_under_the_minimum_are_dropped() {
        let mut s = Speculator::new(vec![Box::new(Fixed(vec![1, 2]))], 8, 3);
        assert!(s.draft(&[], 0, 10).is_empty());
        s.n_min = 2;
        assert_eq!(s.draft(&[], 0, 10), vec![1, 2]);
    }
}
