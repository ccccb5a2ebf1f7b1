//! Speculative decoding: cheap guesses at the next tokens (n-gram lookups in the context or in
//! cache files, a smaller draft model, or the target's own first layers) checked by the target
//! in one batched
//! forward pass. Verification (`Session::generate_with_drafts`, and the server's scheduler)
//! samples the target at every drafted position with the whole sampler chain and keeps drafted
//! tokens while they equal what it sampled, as llama.cpp does: every emitted token is a genuine
//! sample of the target, so output follows the target's distribution exactly, and greedy output
//! is the same as without speculation.

pub mod draft_model;
pub mod lookup_file;
pub mod ngram;
pub mod ngram_cache;
pub mod ngram_map;
pub mod ngram_mod;
pub mod setup;

/// A source of draft tokens.
pub trait Drafter {
    /// Up to `max` tokens guessed to follow `history` (the tokens fed so far) and `last` (the
    /// token just sampled). Empty when it has no guess.
    fn draft(&mut self, history: &[u32], last: u32, max: usize) -> Vec<u32>;

    /// A generation starts after `prompt` (called before its first draft).
    fn begin(&mut self, _prompt: &[u32]) {}

    /// The target kept `n` tokens of this drafter's last draft.
    fn accept(&mut self, _n: usize) {}

    /// Whether `--spec-draft-n-max`/`-n-min` bound this drafter's drafts (the model drafts);
    /// the n-gram drafters have their own limits, as in llama.cpp.
    fn uses_draft_limits(&self) -> bool {
        true
    }

    /// Generation is over: keep what should outlive it (the dynamic lookup cache's file).
    fn finish(&mut self) -> Result<(), setup::SpecError> {
        Ok(())
    }
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
    /// A generation started: the drafters hear of its prompt before the next draft.
    begin_pending: bool,
    /// The drafter of the draft being verified.
    last: Option<usize>,
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
            begin_pending: true,
            last: None,
        }
    }

    /// A new generation starts (a server slot's next request): the drafters learn its prompt
    /// at the next draft.
    pub fn restart(&mut self) {
        self.begin_pending = true;
        self.last = None;
    }

    /// A draft of at most `room` tokens to follow `history` and `last`.
    pub fn draft(&mut self, history: &[u32], last: u32, room: usize) -> Vec<u32> {
        self.last = None;
        if std::mem::take(&mut self.begin_pending) {
            for d in self.drafters.iter_mut() {
                d.begin(history);
            }
        }
        for (i, d) in self.drafters.iter_mut().enumerate() {
            let limited = d.uses_draft_limits();
            let max = if limited { self.n_max.min(room) } else { room };
            if max == 0 || (limited && max < self.n_min) {
                continue;
            }
            let mut draft = d.draft(history, last, max);
            draft.truncate(max);
            if draft.is_empty() {
                continue;
            }
            if limited && draft.len() < self.n_min {
                return Vec::new();
            }
            self.last = Some(i);
            return draft;
        }
        Vec::new()
    }

    /// The target kept `n` tokens of the last draft (0 when there was none).
    pub fn accept(&mut self, n: usize) {
        self.stats.accepted += n;
        if let Some(i) = self.last.take() {
            self.drafters[i].accept(n);
        }
    }

    /// Generation is over: each drafter keeps what should outlive it.
    pub fn finish(&mut self) -> Result<(), setup::SpecError> {
        self.drafters.iter_mut().try_for_each(|d| d.finish())
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

    /// Proposes 1 2 3 4, ignores the draft limits, and logs what it hears.
    struct Free(std::sync::Arc<std::sync::Mutex<Vec<String>>>);
    impl Drafter for Free {
        fn draft(&mut self, _: &[u32], _: u32, _: usize) -> Vec<u32> {
            vec![1, 2, 3, 4]
        }
        fn begin(&mut self, prompt: &[u32]) {
            self.0
                .lock()
                .unwrap()
                .push(format!("begin {}", prompt.len()));
        }
        fn accept(&mut self, n: usize) {
            self.0.lock().unwrap().push(format!("accept {n}"));
        }
        fn uses_draft_limits(&self) -> bool {
            false
        }
    }

    #[test]
    fn ngram_drafters_skip_the_model_limits_and_hear_of_acceptance() {
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut s = Speculator::new(vec![Box::new(Free(log.clone()))], 2, 3);
        assert_eq!(s.draft(&[7, 7], 0, 10), vec![1, 2, 3, 4]);
        s.accept(2);
        s.accept(5); // no draft pending: only counted
        assert_eq!(s.draft(&[7, 7, 7], 0, 3), vec![1, 2, 3]);
        s.restart();
        s.draft(&[1, 2, 3, 4, 5], 0, 10);
        assert_eq!(s.stats.accepted, 7);
        assert_eq!(*log.lock().unwrap(), ["begin 2", "accept 2", "begin 5"]);
    }

    #[test]
    fn drafts_under_the_minimum_are_dropped() {
        let mut s = Speculator::new(vec![Box::new(Fixed(vec![1, 2]))], 8, 3);
        assert!(s.draft(&[], 0, 10).is_empty());
        s.n_min = 2;
        assert_eq!(s.draft(&[], 0, 10), vec![1, 2]);
    }
}
