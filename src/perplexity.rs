//! Perplexity as llama-perplexity computes it: the text is cut into `n_ctx`-token chunks (the
//! first token of each replaced by BOS when the model wants one), each chunk is run from an
//! empty cache, and the second half of each chunk is scored.

use crate::engine::session::Session;
use crate::engine::PlacedModel;
use std::io::Write;

/// The running and final result.
#[derive(Clone, Copy, Debug)]
pub struct PerplexityResult {
    pub chunks: usize,
    pub ppl: f64,
    /// Standard error of the estimate.
    pub ppl_err: f64,
}

/// Why perplexity could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum PerplexityError {
    #[error("you need at least {need} tokens to evaluate perplexity with a context of {n_ctx} (the text has {have})")]
    TooShort {
        need: usize,
        n_ctx: usize,
        have: usize,
    },
    #[error("context size {0} is too small for perplexity (need at least 4)")]
    ContextTooSmall(usize),
    /// A backend failed (a device, an RPC worker).
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
}

/// Scores `tokens` in chunks of `n_ctx`, printing llama-perplexity's progress line to `progress`.
pub fn perplexity(
    model: &PlacedModel,
    tokens: &[u32],
    n_ctx: usize,
    n_batch: usize,
    bos: Option<u32>,
    progress: &mut dyn Write,
) -> Result<PerplexityResult, PerplexityError> {
    if n_ctx < 4 {
        return Err(PerplexityError::ContextTooSmall(n_ctx));
    }
    if tokens.len() < 2 * n_ctx {
        return Err(PerplexityError::TooShort {
            need: 2 * n_ctx,
            n_ctx,
            have: tokens.len(),
        });
    }
    let n_chunk = tokens.len() / n_ctx;
    let n_vocab = model.config.n_vocab;
    let first = n_ctx / 2;
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    for chunk in 0..n_chunk {
        let mut input = tokens[chunk * n_ctx..(chunk + 1) * n_ctx].to_vec();
        if let Some(b) = bos {
            input[0] = b;
        }
        let mut session = Session::try_new(model, n_ctx, n_batch)?;
        let logits = session.feed(&input, true)?;
        for j in first..n_ctx - 1 {
            let row = &logits[j * n_vocab..(j + 1) * n_vocab];
            let target = tokens[chunk * n_ctx + j + 1] as usize;
            let v = -log_softmax_at(row, target);
            nll += v;
            nll2 += v * v;
            count += 1;
        }
        let _ = write!(
            progress,
            "[{}]{:.4},",
            chunk + 1,
            (nll / count as f64).exp()
        );
        let _ = progress.flush();
    }
    let _ = writeln!(progress);
    let mean = nll / count as f64;
    let ppl = mean.exp();
    let var = nll2 / count as f64 - mean * mean;
    let ppl_err = if var > 0.0 {
        (var / (count as f64 - 1.0)).sqrt() * ppl
    } else {
        0.0
    };
    Ok(PerplexityResult {
        chunks: n_chunk,
        ppl,
        ppl_err,
    })
}

/// `log(softmax(logits)[target])`, summing in f64 as llama-perplexity does.
fn log_softmax_at(logits: &[f32], target: usize) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| (l - max).exp() as f64).sum();
    (logits[target] - max) as f64 - sum.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_uniform() {
        let v = log_softmax_at(&[1.0; 4], 2);
        assert!((v - (0.25f64).ln()).abs() < 1e-9);
    }
}
