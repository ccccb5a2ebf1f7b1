//! The forward pass: a batch of tokens (possibly from several sequences) through the model to
//! logits, read top to bottom: the embedding lookup on the host, the blocks on the backends of
//! the model's [`Placement`](crate::backend::Placement) in layer order (the hidden rows crossing
//! between them as host floats), then the output norm and the head. The per-block math belongs
//! to the backends (the CPU's is in `backend/cpu/`).

use super::Config;

/// How much of the model a forward pass runs: all of it, or a cheaper approximation of it for
/// self-speculative drafting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForwardPlan {
    /// Blocks run before the output norm and head (fewer: an early-exit draft).
    pub n_layers: usize,
    /// Routed experts per token in MoE blocks instead of the model's k (0: only the shared
    /// experts); `None`: the model's own k.
    pub routed_experts: Option<usize>,
}

impl ForwardPlan {
    /// The whole model of `cfg`.
    pub fn full(cfg: &Config) -> ForwardPlan {
        ForwardPlan {
            n_layers: cfg.n_layer,
            routed_experts: None,
        }
    }
}

/// Tokens to run in one forward pass. Entry `i` is token `tokens[i]` at position `pos[i]` of
/// sequence `seq[i]` (an index into the caches); `logits[i]` asks for its output row.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub tokens: Vec<u32>,
    pub pos: Vec<usize>,
    pub seq: Vec<usize>,
    pub logits: Vec<bool>,
    /// Attention within each sequence's entries goes both ways: an entry sees every position
    /// of its sequence that the batch reaches (still within a sliding window behind it), as
    /// llama.cpp decodes an image's rows with causal attention off (Gemma 3). False: causal.
    pub bidirectional: bool,
    /// M-RoPE positions (time, height, width, extra) of each entry, for a model with
    /// `Config::rope_sections`; empty: entry `i` is rotated for `pos[i]` in every component.
    /// They differ from `pos` (the cache slot) after an image, whose rows take 2-D positions.
    pub rope_pos: Vec<[i64; 4]>,
}

impl Batch {
    /// Consecutive tokens of sequence 0 starting at `start`; logits for the last one, or for all.
    pub fn sequence(tokens: &[u32], start: usize, all_logits: bool) -> Batch {
        let n = tokens.len();
        Batch {
            tokens: tokens.to_vec(),
            pos: (start..start + n).collect(),
            seq: vec![0; n],
            logits: (0..n).map(|i| all_logits || i + 1 == n).collect(),
            bidirectional: false,
            rope_pos: Vec::new(),
        }
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True when the batch holds no token.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Number of output rows the forward pass will return.
    pub fn n_outputs(&self) -> usize {
        self.logits.iter().filter(|&&l| l).count()
    }
}
