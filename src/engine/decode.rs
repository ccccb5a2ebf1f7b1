//! The decode loop's one step and stop policy, shared by every caller that generates: the CLI,
//! `--chat`, and each server slot (which batches its slots' feeds into one forward pass, so it
//! drives the step itself instead of running [`Session::generate_with_drafts`]'s loop).
//!
//! A step starts from the logits of a pass that fed a token and its draft: each row is sampled
//! in turn by the caller's `sample` (which emits the token, or stops at it), drafted tokens are
//! kept while they equal what was sampled ([`Session::verify`]), then generation stops for the
//! token budget ([`Budget`]) or a full context that no shift can free; otherwise the next feed
//! is the sampled token and a draft within the budget and the room left ([`Session::next_feed`]).

use super::session::Session;
use super::speculative::Speculator;
use crate::backend::BackendError;
use std::ops::ControlFlow;

/// Why generation ended: one reason for every caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    EndOfGeneration,
    /// The requested number of tokens was generated.
    Length,
    /// The context window is full (and no context shift could free room).
    ContextFull,
    /// A stop sequence appeared in the text (the sequence is not part of it).
    StopWord(String),
    /// The caller stopped: its reader went away or asked to stop.
    Cancelled,
}

/// A generation's token budget: `n_predict` tokens (negative: no limit) and how many it has
/// produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    n_predict: i64,
    produced: usize,
}

impl Budget {
    /// A budget of `n_predict` tokens (negative: no limit).
    pub fn new(n_predict: i64) -> Budget {
        Budget {
            n_predict,
            produced: 0,
        }
    }

    /// Tokens produced so far.
    pub fn produced(&self) -> usize {
        self.produced
    }

    /// True once no more tokens may be produced.
    pub fn exhausted(&self) -> bool {
        self.n_predict >= 0 && self.produced as i64 >= self.n_predict
    }

    /// How many drafted tokens may follow the next one: those and the next fit in the budget.
    pub fn draft_room(&self) -> usize {
        if self.n_predict < 0 {
            usize::MAX
        } else {
            (self.n_predict as usize).saturating_sub(self.produced + 1)
        }
    }

    fn count(&mut self) {
        self.produced += 1;
    }
}

/// What one step made of a pass's output rows.
#[derive(Debug, PartialEq, Eq)]
pub struct Step {
    /// Drafted tokens the model agreed with (they stay in the session).
    pub accepted: usize,
    /// `Continue(id)`: the token to feed next; `Break`: why generation ended.
    pub next: ControlFlow<StopReason, u32>,
}

impl Session<'_> {
    /// One decode step after a pass that fed a token and then `draft`, with `rows` the logits
    /// after each of them: `sample(row, history)` chooses (and emits) each row's token or stops
    /// there; each chosen token counts against `budget`, and generation stops with
    /// [`StopReason::Length`] when it is spent, or [`StopReason::ContextFull`] when the
    /// context is full and cannot be shifted. A backend's failure in the context shift is
    /// passed on.
    pub fn step(
        &mut self,
        rows: &[f32],
        draft: &[u32],
        budget: &mut Budget,
        mut sample: impl FnMut(&[f32], &[u32]) -> ControlFlow<StopReason, u32>,
    ) -> Result<Step, BackendError> {
        let verified = self.verify(rows, draft, |row, history| {
            let id = sample(row, history)?;
            budget.count();
            if budget.exhausted() {
                ControlFlow::Break(StopReason::Length)
            } else {
                ControlFlow::Continue(id)
            }
        });
        let next = match verified.next {
            ControlFlow::Continue(_) if !self.make_room()? => {
                ControlFlow::Break(StopReason::ContextFull)
            }
            next => next,
        };
        Ok(Step {
            accepted: verified.accepted,
            next,
        })
    }

    /// The tokens to feed after `next` (chosen, not yet fed): `next`, then `spec`'s draft of at
    /// most what `budget` allows after it and what the context holds.
    pub fn next_feed(&self, spec: Option<&mut Speculator>, next: u32, budget: &Budget) -> Vec<u32> {
        let mut feed = vec![next];
        if let Some(spec) = spec {
            feed.extend(self.draft_after(spec, next, budget.draft_room()));
        }
        feed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_counts_and_leaves_room_for_drafts() {
        let mut b = Budget::new(3);
        assert!(!b.exhausted());
        assert_eq!(b.draft_room(), 2);
        b.count();
        assert_eq!(b.draft_room(), 1);
        b.count();
        assert_eq!(b.draft_room(), 0);
        b.count();
        assert!(b.exhausted());
        assert_eq!(b.produced(), 3);
        assert!(Budget::new(0).exhausted());
        let unlimited = Budget::new(-1);
        assert!(!unlimited.exhausted());
        assert_eq!(unlimited.draft_room(), usize::MAX);
    }
}
