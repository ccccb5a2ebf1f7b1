//! A token budget for thinking (`--reasoning-budget N`, a request's `reasoning_budget_tokens`):
//! once a thought has opened (its start tag generated, or left open by the prompt), it may run
//! for N tokens; then the sampler forces the budget message and the end tag, one token a step,
//! and generation goes on with the answer. A thought that ends by itself uses no more of it; a
//! later thought gets a fresh budget. The last budgeted token is allowed to finish a UTF-8
//! character before the end is forced. This is llama.cpp's reasoning-budget sampler's contract.

/// What a budget watches for and what it forces, in tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetSpec {
    /// The start tag (`<think>`).
    pub start: Vec<u32>,
    /// End tags (`</think>`): any of them ends a thought naturally.
    pub ends: Vec<Vec<u32>>,
    /// Forced when the budget is spent: the message, then the first end tag.
    pub forced: Vec<u32>,
    /// Tokens a thought may use.
    pub tokens: usize,
    /// The prompt left a thought open: counting starts with the first generated token.
    pub starts_inside: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Outside a thought, watching for the start tag.
    Idle,
    /// Inside a thought with this many tokens left.
    Counting(usize),
    /// Spent, waiting for the current UTF-8 character to finish.
    WaitingUtf8,
    /// Forcing `forced[i]` next.
    Forcing(usize),
}

/// The budget's state over one reply.
#[derive(Clone, Debug)]
pub struct ReasoningBudget {
    spec: BudgetSpec,
    stage: Stage,
    /// The last generated tokens, for tag matching (as long as the longest tag).
    recent: Vec<u32>,
}

impl ReasoningBudget {
    pub fn new(spec: BudgetSpec) -> ReasoningBudget {
        let mut b = ReasoningBudget {
            stage: Stage::Idle,
            recent: Vec::new(),
            spec,
        };
        b.reset();
        b
    }

    /// Back to the start of a reply.
    pub fn reset(&mut self) {
        self.recent.clear();
        self.stage = if self.spec.starts_inside {
            self.open()
        } else {
            Stage::Idle
        };
    }

    /// The token the budget forces next, if it is forcing.
    pub fn forced(&self) -> Option<u32> {
        match self.stage {
            Stage::Forcing(i) => self.spec.forced.get(i).copied(),
            _ => None,
        }
    }

    /// True while inside a thought (counting or closing it).
    pub fn thinking(&self) -> bool {
        self.stage != Stage::Idle
    }

    /// Moves past the generated token `id`; `utf8_complete`: its bytes end on a character
    /// boundary.
    pub fn accept(&mut self, id: u32, utf8_complete: bool) {
        let longest = std::iter::once(&self.spec.start)
            .chain(&self.spec.ends)
            .map(Vec::len)
            .max()
            .unwrap_or(0);
        self.recent.push(id);
        if self.recent.len() > longest {
            self.recent.remove(0);
        }
        self.stage = match self.stage {
            Stage::Idle if self.recent.ends_with(&self.spec.start) => self.open(),
            Stage::Idle => Stage::Idle,
            Stage::Counting(_) | Stage::WaitingUtf8 if self.ended() => Stage::Idle,
            Stage::Counting(left) if left > 1 => Stage::Counting(left - 1),
            Stage::Counting(_) | Stage::WaitingUtf8 if utf8_complete => self.force(),
            Stage::Counting(_) | Stage::WaitingUtf8 => Stage::WaitingUtf8,
            Stage::Forcing(i) if i + 1 < self.spec.forced.len() => Stage::Forcing(i + 1),
            Stage::Forcing(_) => {
                self.recent.clear();
                Stage::Idle
            }
        };
    }

    /// A thought opens: a zero budget forces its end at once.
    fn open(&self) -> Stage {
        match self.spec.tokens {
            0 => self.force(),
            n => Stage::Counting(n),
        }
    }

    fn force(&self) -> Stage {
        if self.spec.forced.is_empty() {
            Stage::Idle
        } else {
            Stage::Forcing(0)
        }
    }

    fn ended(&self) -> bool {
        self.spec
            .ends
            .iter()
            .any(|e| !e.is_empty() && self.recent.ends_with(e))
    }
}

/// Whether `bytes` end on a UTF-8 character boundary (an empty piece does).
pub fn utf8_complete(bytes: &[u8]) -> bool {
    // Find the last lead byte within the final four and check its sequence is whole.
    for back in 1..=bytes.len().min(4) {
        let b = bytes[bytes.len() - back];
        if b & 0xC0 == 0x80 {
            continue;
        }
        let need = match b {
            0x00..=0x7F => 1,
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            _ => 4,
        };
        return back >= need;
    }
    bytes.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: u32 = 100;
    const CLOSE: u32 = 101;

    fn spec(tokens: usize, starts_inside: bool) -> BudgetSpec {
        BudgetSpec {
            start: vec![OPEN],
            ends: vec![vec![CLOSE]],
            forced: vec![7, 8, CLOSE],
            tokens,
            starts_inside,
        }
    }

    /// Runs `generated` through the budget, taking the forced token where it forces one;
    /// returns what was emitted.
    fn run(b: &mut ReasoningBudget, generated: &[u32]) -> Vec<u32> {
        let mut out = Vec::new();
        let mut it = generated.iter();
        loop {
            let id = match b.forced() {
                Some(f) => f,
                None => match it.next() {
                    Some(&id) => id,
                    None => return out,
                },
            };
            b.accept(id, true);
            out.push(id);
        }
    }

    #[test]
    fn a_spent_budget_forces_the_message_and_the_end_tag() {
        let mut b = ReasoningBudget::new(spec(2, false));
        let out = run(&mut b, &[1, OPEN, 2, 3, 4, 5]);
        assert_eq!(out, [1, OPEN, 2, 3, 7, 8, CLOSE, 4, 5]);
        assert!(!b.thinking());
    }

    #[test]
    fn a_thought_that_ends_itself_is_left_alone_and_the_next_gets_a_fresh_budget() {
        let mut b = ReasoningBudget::new(spec(3, false));
        let out = run(&mut b, &[OPEN, 2, CLOSE, 9, OPEN, 1, 2, 3, 4]);
        assert_eq!(out, [OPEN, 2, CLOSE, 9, OPEN, 1, 2, 3, 7, 8, CLOSE, 4]);
    }

    #[test]
    fn a_prompt_that_opens_the_thought_counts_from_the_first_token_and_zero_closes_at_once() {
        let mut b = ReasoningBudget::new(spec(1, true));
        assert_eq!(run(&mut b, &[5, 6]), [5, 7, 8, CLOSE, 6]);
        let mut zero = ReasoningBudget::new(spec(0, true));
        assert_eq!(zero.forced(), Some(7));
        assert_eq!(run(&mut zero, &[5]), [7, 8, CLOSE, 5]);
        zero.reset();
        assert_eq!(zero.forced(), Some(7));
    }

    #[test]
    fn the_end_waits_for_a_whole_character() {
        let mut b = ReasoningBudget::new(spec(1, true));
        b.accept(1, false);
        assert_eq!(b.forced(), None);
        b.accept(2, true);
        assert_eq!(b.forced(), Some(7));
    }

    #[test]
    fn multi_token_tags_match_across_tokens() {
        let mut b = ReasoningBudget::new(BudgetSpec {
            start: vec![1, 2],
            ends: vec![vec![3, 4]],
            forced: vec![9, 3, 4],
            tokens: 5,
            starts_inside: false,
        });
        assert_eq!(run(&mut b, &[2, 1, 2, 5, 3, 4, 6]), [2, 1, 2, 5, 3, 4, 6]);
        assert!(!b.thinking());
    }

    #[test]
    fn utf8_boundaries() {
        assert!(utf8_complete(b"abc"));
        assert!(utf8_complete("é".as_bytes()));
        assert!(!utf8_complete(&"é".as_bytes()[..1]));
        assert!(!utf8_complete(&"€".as_bytes()[..2]));
        assert!(utf8_complete("a€".as_bytes()));
        assert!(utf8_complete(b""));
    }
}
