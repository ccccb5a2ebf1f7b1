//! Log-probabilities for the API's `logprobs` / `top_logprobs` / `n_probs`: the chosen token's
//! and the most likely tokens' log-softmax under the model's raw logits (before any sampler),
//! or, for llama-server's `post_sampling_probs`, the same read from the distribution the
//! sampler chain left ([`after_sampling`]).

/// One token's log-probability.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
}

/// The chosen token's log-probability and the `top_n` most likely tokens', best first.
#[derive(Clone, Debug, PartialEq)]
pub struct StepLogprobs {
    pub chosen: TokenLogprob,
    pub top: Vec<TokenLogprob>,
}

/// Log-softmax of `logits` at `chosen` and at the `top_n` highest logits.
pub fn step(logits: &[f32], chosen: u32, top_n: usize) -> StepLogprobs {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let log_z = max as f64 + sum.ln();
    let lp = |id: u32| TokenLogprob {
        id,
        logprob: (logits
            .get(id as usize)
            .copied()
            .unwrap_or(f32::NEG_INFINITY) as f64
            - log_z) as f32,
    };
    let top_n = top_n.min(logits.len());
    let mut top = Vec::new();
    if top_n > 0 {
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let cmp = |a: &u32, b: &u32| {
            logits[*b as usize]
                .total_cmp(&logits[*a as usize])
                .then(a.cmp(b))
        };
        idx.select_nth_unstable_by(top_n - 1, cmp);
        idx.truncate(top_n);
        idx.sort_by(cmp);
        top = idx.into_iter().map(lp).collect();
    }
    StepLogprobs {
        chosen: lp(chosen),
        top,
    }
}

/// The chosen token's and the `top_n` most likely tokens' log-probabilities under the
/// distribution a sampler chain left (`candidates`: ids and probabilities, most likely first).
/// Tokens the chain removed have probability 0 (logprob `-inf`); the top list holds only
/// tokens with a probability above 0, so it may be shorter than `top_n`, as in llama-server.
pub fn after_sampling(candidates: &[(u32, f32)], chosen: u32, top_n: usize) -> StepLogprobs {
    let lp = |id: u32, p: f32| TokenLogprob {
        id,
        logprob: p.ln(),
    };
    let p_chosen = candidates
        .iter()
        .find(|(id, _)| *id == chosen)
        .map_or(0.0, |&(_, p)| p);
    StepLogprobs {
        chosen: lp(chosen, p_chosen),
        top: candidates
            .iter()
            .take(top_n)
            .take_while(|(_, p)| *p > 0.0)
            .map(|&(id, p)| lp(id, p))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_of_chosen_and_top() {
        // probs 0.5, 0.25, 0.25
        let logits = [2f32.ln(), 0.0, 0.0];
        let s = step(&logits, 2, 2);
        assert!((s.chosen.logprob - 0.25f32.ln()).abs() < 1e-6);
        assert_eq!(s.top.iter().map(|t| t.id).collect::<Vec<_>>(), vec![0, 1]);
        assert!((s.top[0].logprob - 0.5f32.ln()).abs() < 1e-6);
        assert!(step(&logits, 0, 0).top.is_empty());
    }

    #[test]
    fn after_sampling_reads_the_chains_distribution() {
        let cands = [(7, 0.75f32), (3, 0.25), (9, 0.0)];
        let s = after_sampling(&cands, 3, 5);
        assert!((s.chosen.logprob.exp() - 0.25).abs() < 1e-6);
        // The zero-probability candidate is left out: fewer than top_n.
        assert_eq!(s.top.iter().map(|t| t.id).collect::<Vec<_>>(), vec![7, 3]);
        assert_eq!(
            after_sampling(&cands, 1, 1).chosen.logprob,
            f32::NEG_INFINITY
        );
        assert_eq!(after_sampling(&cands, 1, 1).top.len(), 1);
    }
}
