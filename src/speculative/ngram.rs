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
    fn draft(&mut self, context: &[u32], max: usize) -> Vec<u32> {
        let (n, len) = (self.size_n.max(1), context.len());
        if len <= n {
            return Vec::new();
        }
        let pattern = &context[len - n..];
        // Latest earlier occurrence that is followed by at least one token.
        let Some(start) = (0..len - n).rev().find(|&j| &context[j..j + n] == pattern) else {
            return Vec::new();
        };
        let from = start + n;
        let take = self.size_m.min(max).min(len - from);
        context[from..from + take].to_vec()
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
        //              0  1  2  3  4  5  6  7  8  9
        let context = [5, 1, 2, 7, 8, 1, 2, 9, 4, 1, 2];
        // "1 2" last seen at 5..7, followed by 9 4 1
        assert_eq!(d.draft(&context, 10), vec![9, 4, 1]);
        assert_eq!(d.draft(&context, 2), vec![9, 4]);
        assert!(d.draft(&[1, 2, 3], 4).is_empty());
        assert!(d.draft(&[1, 2], 4).is_empty());
    }
}
