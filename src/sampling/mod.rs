//! Turning logits into the next token: a chain of samplers, each in its own file, applied in
//! llama.cpp's default order (penalties → top-k → top-p → min-p → temperature → draw), with a
//! seeded random generator so that a fixed seed reproduces a run.

mod candidates;
mod min_p;
mod penalties;
mod rng;
mod temperature;
mod top_k;
mod top_p;

pub use candidates::Candidates;
pub use rng::Rng;

/// Sampling settings, named after llama.cpp's flags.
#[derive(Clone, Debug)]
pub struct SamplingParams {
    /// `<= 0` picks the most likely token (greedy).
    pub temperature: f32,
    /// `<= 0` keeps every token.
    pub top_k: i32,
    /// `>= 1` keeps every token.
    pub top_p: f32,
    /// `<= 0` keeps every token.
    pub min_p: f32,
    /// 1.0 disables it.
    pub repeat_penalty: f32,
    /// How many recent tokens the penalty looks at (0 disables, -1 means the whole context).
    pub repeat_last_n: i32,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

/// A sampler chain with its own random state.
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
}

impl Sampler {
    /// A chain for `params`, its random generator seeded with `params.seed`.
    pub fn new(params: SamplingParams) -> Sampler {
        let rng = Rng::new(params.seed);
        Sampler { params, rng }
    }

    /// Picks the next token from `logits`, given the tokens seen so far (for penalties).
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let p = &self.params;
        let mut c = Candidates::from_logits(logits);
        let window = match p.repeat_last_n {
            n if n < 0 => history.len(),
            n => (n as usize).min(history.len()),
        };
        penalties::apply_repeat(&mut c, &history[history.len() - window..], p.repeat_penalty);
        if p.temperature <= 0.0 {
            return c.argmax();
        }
        top_k::apply(&mut c, p.top_k);
        top_p::apply(&mut c, p.top_p);
        min_p::apply(&mut c, p.min_p);
        temperature::apply(&mut c, p.temperature);
        c.draw(&mut self.rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_argmax() {
        let mut s = Sampler::new(SamplingParams {
            temperature: 0.0,
            ..Default::default()
        });
        assert_eq!(s.sample(&[0.1, 3.0, 2.9], &[]), 1);
    }

    #[test]
    fn fixed_seed_reproduces() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let run = || {
            let mut s = Sampler::new(SamplingParams {
                seed: 42,
                top_k: 0,
                min_p: 0.0,
                ..Default::default()
            });
            (0..50).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        assert!(
            a.iter().any(|&t| t != a[0]),
            "sampling at temperature 0.8 should vary"
        );
    }
}
