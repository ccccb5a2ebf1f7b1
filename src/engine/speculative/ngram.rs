//! Drafts from the context itself (llama.cpp's `ngram-simple`): find the latest earlier place
//! where the last `n` tokens occurred, and propose the tokens that followed them there. Costs
//! no model call; pays off on repetitive text such as code being edited.

use super::Drafter;

/// The n-gram lookup drafter.
pub struct NgramDrafter {
    /// Length of the n-gram looked up (the context's last tokens).
    pub size_n: usize,
    /// Most tokens proposed after a match.
    pub size_m: usize,
}

impl Drafter for NgramDrafter {
    fn draft(&mut self, history: &[u32], last: u32, max: usize) -> Vec<u32> {
        // The context is `history` followed by `last`, read without copying it.
        let len = history.len() + 1;
        let at = |i: usize| if i < history.len() { history[i] } else { last };
        let n = self.size_n.max(1);
        if len <= n {
            return Vec::new();
        }
        let matches = |j: usize| (0..n).all(|k| at(j + k) == at(len - n + k));
        // Latest earlier occurrence that is followed by at least one token.
        let Some(start) = (0..len - n).rev().find(|&j| matches(j)) else {
            return Vec::new();
        };
        let from = start + n;
        let take = self.size_m.min(max).min(len - from);
        (from..from + take).map(at).collect()
    }

    fn uses_draft_limits(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposes_what_followed_the_latest_match() {
        let mut d = NgramDrafter {
            size_n: 2,
            size_m: 3,
        };
        //              0  1  2  3  4  5  6  7  8  9  (last: 2)
        let history = [5, 1, 2, 7, 8, 1, 2, 9, 4, 1];
        // "1 2" last seen at 5..7, followed by 9 4 1
        assert_eq!(d.draft(&history, 2, 10), vec![9, 4, 1]);
        assert_eq!(d.draft(&history, 2, 2), vec![9, 4]);
        assert!(d.draft(&[1, 2], 3, 4).is_empty());
        assert!(d.draft(&[1], 2, 4).is_empty());
    }
}
