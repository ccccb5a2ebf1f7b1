//! Drafts from a model run greedily: a smaller model sharing the target's vocabulary
//! (`--model-draft`), or the target's own first layers (`--n-layer-exit-draft`, self-speculative
//! early exit). The drafter keeps its own cache in step with the sequence, re-feeding only what
//! changed since its last draft, and stops drafting when its top token's probability falls
//! under `p_min`.

use super::Drafter;
use crate::engine::session::Session;
use crate::tokenizer::Tokenizer;

/// A model-backed drafter.
pub struct ModelDrafter<'m> {
    session: Session<'m>,
    /// Stop drafting when the best token's probability is lower.
    pub p_min: f32,
    /// Tokens at or above this id are outside the target's vocabulary: drafting stops there.
    target_vocab: usize,
}

impl<'m> ModelDrafter<'m> {
    /// Drafts with `session` (an empty session of the draft model, or of the target with fewer
    /// layers) for a target whose vocabulary has `target_vocab` entries.
    pub fn new(session: Session<'m>, p_min: f32, target_vocab: usize) -> Self {
        ModelDrafter {
            session,
            p_min,
            target_vocab,
        }
    }

    /// Logits after `history` and `last`, feeding the draft session only what it lacks (at
    /// least `last`, whose logits are needed). `None` when the context has no room, or when a
    /// backend fails: a draft is optional, and the target's own pass reports the failure.
    fn catch_up(&mut self, history: &[u32], last: u32) -> Option<Vec<f32>> {
        let keep = self.session.keep_prefix(history, history.len());
        if self.session.remaining() < history.len() - keep + 1 {
            return None;
        }
        let mut tail = history[keep..].to_vec();
        tail.push(last);
        self.session.feed(&tail, false).ok()
    }
}

impl Drafter for ModelDrafter<'_> {
    fn draft(&mut self, history: &[u32], last: u32, max: usize) -> Vec<u32> {
        if max == 0 {
            return Vec::new();
        }
        let Some(mut logits) = self.catch_up(history, last) else {
            return Vec::new();
        };
        let mut draft = Vec::new();
        loop {
            let (id, p) = best(&logits);
            if p < self.p_min || id as usize >= self.target_vocab {
                break;
            }
            draft.push(id);
            if draft.len() == max || self.session.remaining() == 0 {
                break;
            }
            logits = match self.session.feed(&[id], false) {
                Ok(l) => l,
                // (As in `catch_up`: the target's pass reports the failure.)
                Err(_) => break,
            };
        }
        draft
    }
}

/// The most likely token and its softmax probability.
fn best(logits: &[f32]) -> (u32, f32) {
    let (mut id, mut top) = (0usize, f32::NEG_INFINITY);
    for (i, &l) in logits.iter().enumerate() {
        if l > top {
            (id, top) = (i, l);
        }
    }
    let sum: f64 = logits.iter().map(|&l| ((l - top) as f64).exp()).sum();
    (id as u32, (1.0 / sum) as f32)
}

/// Why a draft model cannot serve a target.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VocabMismatch {
    #[error("the draft model's vocabulary has {draft} tokens, the target's {target}: more than 128 apart")]
    Size { draft: usize, target: usize },
    #[error("the draft model's token {id} is {draft:?}, the target's is {target:?}")]
    Token {
        id: usize,
        draft: String,
        target: String,
    },
}

/// Checks that `draft` tokenizes like `target` (llama.cpp's test: sizes within 128, and the same
/// token text for every id both have).
pub fn check_vocab(draft: &Tokenizer, target: &Tokenizer) -> Result<(), VocabMismatch> {
    let (nd, nt) = (draft.n_vocab(), target.n_vocab());
    if nd.abs_diff(nt) > 128 {
        return Err(VocabMismatch::Size {
            draft: nd,
            target: nt,
        });
    }
    for id in 0..nd.min(nt) {
        let (a, b) = (draft.token_text(id as u32), target.token_text(id as u32));
        if a != b {
            return Err(VocabMismatch::Token {
                id,
                draft: a.unwrap_or_default().to_string(),
                target: b.unwrap_or_default().to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_token_and_probability() {
        let (id, p) = best(&[0.0, 2.0, 0.0]);
        assert_eq!(id, 1);
        let want = 2f32.exp() / (2.0 + 2f32.exp());
        assert!((p - want).abs() < 1e-6);
    }
}
