//! Turning logits into the next token: llama.cpp's sampler chain, one sampler per file.
//!
//! Order: logit bias → penalties (repeat, frequency, presence) → DRY → top-n-sigma → top-k →
//! typical-p → top-p → min-p → XTC → temperature (fixed or dynamic) → a seeded draw. The part
//! from penalties to temperature follows [`SamplingParams::samplers`] (`--samplers` /
//! `--sampling-seq`); Mirostat v1/v2 replaces it with temperature then Mirostat. Temperature
//! `<= 0` is greedy: the most likely token after bias, penalties and DRY.
//!
//! With a grammar, the chain runs first on the raw logits and the token is kept when the
//! grammar accepts it (llama.cpp's order); otherwise every token the grammar rejects is masked
//! and the chain runs again. End-of-generation is allowed only where the grammar can end.
//!
//! Owns sampling only; where logits come from is `model`, what happens to the token is
//! `engine::session` or the server.

mod candidates;
mod dry;
pub mod grammar;
mod logit_bias;
pub mod logprobs;
mod min_p;
mod mirostat;
mod penalties;
pub mod reasoning_budget;
mod rng;
mod temperature;
mod top_k;
mod top_n_sigma;
mod top_p;
mod typical;
mod vocab;
mod xtc;

pub use candidates::{Candidate, Candidates};
pub use grammar::Grammar;
pub use reasoning_budget::{BudgetSpec, ReasoningBudget};
pub use rng::{random_seed, resolve_seed, Rng};
pub use vocab::TokenVocab;

use std::sync::Arc;

/// One reorderable step of the chain, with llama.cpp's names and letters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SamplerKind {
    Penalties,
    Dry,
    TopNSigma,
    TopK,
    TypicalP,
    TopP,
    MinP,
    Xtc,
    Temperature,
}

impl SamplerKind {
    /// llama.cpp's default order.
    pub const DEFAULT: [SamplerKind; 9] = [
        SamplerKind::Penalties,
        SamplerKind::Dry,
        SamplerKind::TopNSigma,
        SamplerKind::TopK,
        SamplerKind::TypicalP,
        SamplerKind::TopP,
        SamplerKind::MinP,
        SamplerKind::Xtc,
        SamplerKind::Temperature,
    ];

    /// The canonical name (`--samplers`).
    pub fn name(self) -> &'static str {
        match self {
            SamplerKind::Penalties => "penalties",
            SamplerKind::Dry => "dry",
            SamplerKind::TopNSigma => "top_n_sigma",
            SamplerKind::TopK => "top_k",
            SamplerKind::TypicalP => "typ_p",
            SamplerKind::TopP => "top_p",
            SamplerKind::MinP => "min_p",
            SamplerKind::Xtc => "xtc",
            SamplerKind::Temperature => "temperature",
        }
    }

    /// A name or one of llama.cpp's alternative spellings.
    pub fn from_name(name: &str) -> Option<SamplerKind> {
        Some(match name {
            "penalties" => SamplerKind::Penalties,
            "dry" => SamplerKind::Dry,
            "top_n_sigma" | "top-n-sigma" => SamplerKind::TopNSigma,
            "top_k" | "top-k" => SamplerKind::TopK,
            "typ_p" | "typ-p" | "typ" | "typical_p" | "typical-p" | "typical" => {
                SamplerKind::TypicalP
            }
            "top_p" | "top-p" | "nucleus" => SamplerKind::TopP,
            "min_p" | "min-p" => SamplerKind::MinP,
            "xtc" => SamplerKind::Xtc,
            "temperature" | "temp" => SamplerKind::Temperature,
            _ => return None,
        })
    }

    /// The letter of `--sampling-seq`.
    pub fn from_letter(c: char) -> Option<SamplerKind> {
        Some(match c {
            'e' => SamplerKind::Penalties,
            'd' => SamplerKind::Dry,
            's' => SamplerKind::TopNSigma,
            'k' => SamplerKind::TopK,
            'y' => SamplerKind::TypicalP,
            'p' => SamplerKind::TopP,
            'm' => SamplerKind::MinP,
            'x' => SamplerKind::Xtc,
            't' => SamplerKind::Temperature,
            _ => return None,
        })
    }

    /// `--samplers` text: names separated by `;` (or `,`).
    pub fn parse_list(text: &str) -> Result<Vec<SamplerKind>, String> {
        text.split([';', ','])
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                SamplerKind::from_name(s).ok_or_else(|| {
                    format!(
                        "unknown sampler '{s}' (known: {})",
                        SamplerKind::DEFAULT.map(SamplerKind::name).join(";")
                    )
                })
            })
            .collect()
    }

    /// `--sampling-seq` text: one letter per sampler (`edskypmxt`).
    pub fn parse_letters(text: &str) -> Result<Vec<SamplerKind>, String> {
        text.chars()
            .map(|c| {
                SamplerKind::from_letter(c)
                    .ok_or_else(|| format!("unknown sampler letter '{c}' (known: edskypmxt)"))
            })
            .collect()
    }
}

/// Where `needle` first occurs in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Sampling settings, named after llama.cpp's flags, with its defaults.
#[derive(Clone, Debug)]
pub struct SamplingParams {
    /// `<= 0` picks the most likely token (greedy).
    pub temperature: f32,
    /// `> 0`: dynamic temperature in `[temperature - range, temperature + range]`.
    pub dynatemp_range: f32,
    pub dynatemp_exponent: f32,
    /// `<= 0` keeps every token.
    pub top_k: i32,
    /// `>= 1` keeps every token.
    pub top_p: f32,
    /// `<= 0` keeps every token.
    pub min_p: f32,
    /// `>= 1` keeps every token.
    pub typical_p: f32,
    /// `<= 0` keeps every token.
    pub top_n_sigma: f32,
    pub xtc_probability: f32,
    pub xtc_threshold: f32,
    /// 1.0 disables it.
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties look at (0 disables, -1 means the whole context).
    pub repeat_last_n: i32,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    /// 0 disables DRY.
    pub dry_multiplier: f32,
    pub dry_base: f32,
    pub dry_allowed_length: usize,
    /// -1: the whole context, 0: off.
    pub dry_penalty_last_n: i32,
    pub dry_sequence_breakers: Vec<String>,
    /// 0: off, 1 or 2: Mirostat version.
    pub mirostat: u8,
    pub mirostat_tau: f32,
    pub mirostat_eta: f32,
    /// Added to the logits of these tokens first (`-inf` bans a token).
    pub logit_bias: Vec<(u32, f32)>,
    /// The order of the middle of the chain.
    pub samplers: Vec<SamplerKind>,
    pub seed: u64,
    /// Output must match this grammar.
    pub grammar: Option<Arc<Grammar>>,
    /// Non-empty: the grammar is lazy, as llama.cpp's: output is free until one of these
    /// strings appears, and the grammar then holds from where it starts (a tool call).
    pub grammar_triggers: Vec<String>,
    /// A token budget for thinking: spent, the end of the thought is forced.
    pub reasoning_budget: Option<BudgetSpec>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.8,
            dynatemp_range: 0.0,
            dynatemp_exponent: 1.0,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            typical_p: 1.0,
            top_n_sigma: -1.0,
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_penalty_last_n: 64,
            dry_sequence_breakers: ["\n", ":", "\"", "*"].map(String::from).to_vec(),
            mirostat: 0,
            mirostat_tau: 5.0,
            mirostat_eta: 0.1,
            logit_bias: Vec::new(),
            samplers: SamplerKind::DEFAULT.to_vec(),
            seed: 0,
            grammar: None,
            grammar_triggers: Vec::new(),
            reasoning_budget: None,
        }
    }
}

/// A sampler chain with its own random state, Mirostat state and grammar state.
pub struct Sampler {
    params: SamplingParams,
    vocab: Arc<TokenVocab>,
    rng: Rng,
    breakers: dry::Breakers,
    mirostat: mirostat::Mirostat,
    matcher: Option<grammar::Matcher>,
    /// A lazy grammar not yet triggered: the reply's bytes so far.
    untriggered: Option<Vec<u8>>,
    budget: Option<ReasoningBudget>,
    /// Set while [`Sampler::sample_with_probs`] runs: the chain keeps what it left.
    capture: bool,
    /// The candidates the last chain run left, with their probabilities, most likely first.
    captured: Vec<(u32, f32)>,
}

impl Sampler {
    /// A chain for `params` over `vocab`, its random generator seeded with `params.seed`.
    pub fn new(params: SamplingParams, vocab: Arc<TokenVocab>) -> Sampler {
        let rng = Rng::new(params.seed);
        let breakers = if params.dry_multiplier != 0.0 {
            dry::Breakers::new(&params.dry_sequence_breakers, vocab.pieces(), |s| {
                vocab.tokenize(s)
            })
        } else {
            dry::Breakers::default()
        };
        let mirostat =
            mirostat::Mirostat::new(params.mirostat, params.mirostat_tau, params.mirostat_eta);
        let budget = params.reasoning_budget.clone().map(ReasoningBudget::new);
        let mut s = Sampler {
            params,
            vocab,
            rng,
            breakers,
            mirostat,
            matcher: None,
            untriggered: None,
            budget,
            capture: false,
            captured: Vec::new(),
        };
        s.reset_grammar();
        s
    }

    /// Starts the grammar (and the thinking budget) over, for a new answer in the same
    /// conversation.
    pub fn reset_grammar(&mut self) {
        let lazy = !self.params.grammar_triggers.is_empty();
        self.matcher = match lazy {
            true => None,
            false => self.params.grammar.clone().map(grammar::Matcher::new),
        };
        self.untriggered = (lazy && self.params.grammar.is_some()).then(Vec::new);
        if let Some(b) = self.budget.as_mut() {
            b.reset();
        }
    }

    /// The settings this chain was built with.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Picks the next token from `logits`, given the tokens seen so far (for penalties and
    /// DRY), and moves the grammar past it; while the thinking budget forces the end of a
    /// thought, that token.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let id = match self.budget.as_ref().and_then(ReasoningBudget::forced) {
            Some(forced) => {
                if self.grammar_allows(forced) {
                    self.grammar_accept(forced);
                }
                if self.capture {
                    self.captured = vec![(forced, 1.0)];
                }
                forced
            }
            None => self.sample_constrained(logits, history),
        };
        let piece = self.vocab.piece(id);
        if let Some(b) = self.budget.as_mut() {
            b.accept(id, reasoning_budget::utf8_complete(piece));
        }
        self.watch_triggers(id);
        id
    }

    /// A lazy grammar's wait: once a trigger is in the reply (outside a thought), the grammar
    /// takes the text from the trigger on, and holds from then; text it cannot take drops it.
    fn watch_triggers(&mut self, id: u32) {
        let Some(text) = self.untriggered.as_mut() else {
            return;
        };
        if self.budget.as_ref().is_some_and(ReasoningBudget::thinking) {
            text.clear();
            return;
        }
        // Only where a trigger could end in the new bytes: the rest was searched before.
        let longest = self.params.grammar_triggers.iter().map(String::len).max();
        let from = text.len().saturating_sub(longest.unwrap_or(0));
        text.extend_from_slice(self.vocab.piece(id));
        let start = self
            .params
            .grammar_triggers
            .iter()
            .filter_map(|t| find(&text[from..], t.as_bytes()))
            .min()
            .map(|at| from + at);
        let (Some(start), Some(g)) = (start, self.params.grammar.clone()) else {
            return;
        };
        let mut m = grammar::Matcher::new(g);
        if m.accepts(&text[start..]) {
            m.advance(&text[start..]);
            self.matcher = Some(m);
        }
        self.untriggered = None;
    }

    /// The chain, then the grammar.
    fn sample_constrained(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        if self.matcher.is_none() {
            return self.run_chain(logits, history);
        }
        let saved = self.mirostat.clone();
        let id = self.run_chain(logits, history);
        if self.grammar_allows(id) {
            self.grammar_accept(id);
            return id;
        }
        self.mirostat = saved;
        let mut masked = logits.to_vec();
        if !self.apply_grammar(&mut masked) {
            // Nothing can continue the grammar with this vocabulary: end generation, saying so
            // when this mask refused bytes for the matcher's bound rather than the grammar.
            if self.matcher.as_ref().is_some_and(|m| m.stack_limit_hit()) {
                eprintln!(
                    "grammar: generation ended where the grammar became too ambiguous to follow \
                     (over {} parse stacks at once); an unambiguous grammar avoids this",
                    grammar::MAX_STACKS
                );
            }
            return self.vocab.eog_ids().first().copied().unwrap_or(id);
        }
        let id = self.run_chain(&masked, history);
        self.grammar_accept(id);
        id
    }

    /// [`Sampler::sample`], also returning the candidates the chain left at the end and their
    /// probabilities (the distribution the token was drawn from), most likely first.
    pub fn sample_with_probs(&mut self, logits: &[f32], history: &[u32]) -> (u32, Vec<(u32, f32)>) {
        self.capture = true;
        let id = self.sample(logits, history);
        self.capture = false;
        (id, std::mem::take(&mut self.captured))
    }

    /// Keeps the final candidates' probabilities when [`Sampler::sample_with_probs`] asked.
    fn keep_final(&mut self, c: &Candidates) {
        if !self.capture {
            return;
        }
        let mut out: Vec<(u32, f32)> = c.ids().into_iter().zip(c.probs()).collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        self.captured = out;
    }

    /// Sets the logits of tokens the grammar rejects to `-inf`; false when none is left. The
    /// matcher's `stack_limit_hit` then tells whether this mask refused bytes for its bound.
    pub fn apply_grammar(&mut self, logits: &mut [f32]) -> bool {
        let Some(m) = self.matcher.as_mut() else {
            return true;
        };
        m.clear_stack_limit_hit();
        let mut allowed = vec![false; logits.len()];
        self.vocab.trie().allowed(m, |id| {
            if let Some(a) = allowed.get_mut(id as usize) {
                *a = true;
            }
        });
        if m.can_end() {
            for &id in self.vocab.eog_ids() {
                if let Some(a) = allowed.get_mut(id as usize) {
                    *a = true;
                }
            }
        }
        let mut any = false;
        for (l, ok) in logits.iter_mut().zip(&allowed) {
            if *ok {
                any |= *l != f32::NEG_INFINITY;
            } else {
                *l = f32::NEG_INFINITY;
            }
        }
        any
    }

    /// Whether the grammar (if any) lets `id` come next.
    pub fn grammar_allows(&mut self, id: u32) -> bool {
        let Some(m) = self.matcher.as_mut() else {
            return true;
        };
        if self.vocab.is_eog(id) {
            return m.can_end();
        }
        let piece = self.vocab.piece(id);
        !piece.is_empty() && m.accepts(piece)
    }

    fn grammar_accept(&mut self, id: u32) {
        if let Some(m) = self.matcher.as_mut() {
            if !self.vocab.is_eog(id) {
                m.advance(self.vocab.piece(id));
            }
        }
    }

    /// The chain without the grammar.
    fn run_chain(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let p = &self.params;
        let mut c = if p.logit_bias.is_empty() {
            Candidates::from_logits(logits)
        } else {
            let mut biased = logits.to_vec();
            logit_bias::apply_to_logits(&mut biased, &p.logit_bias);
            Candidates::from_logits(&biased)
        };
        c.drop_masked();
        let window = match p.repeat_last_n {
            n if n < 0 => history.len(),
            n => (n as usize).min(history.len()),
        };
        let recent = &history[history.len() - window..];
        let pens = penalties::Penalties {
            repeat: p.repeat_penalty,
            frequency: p.frequency_penalty,
            presence: p.presence_penalty,
        };
        let temp = temperature::Temperature {
            temp: p.temperature,
            dynatemp_range: p.dynatemp_range,
            dynatemp_exponent: p.dynatemp_exponent,
        };
        if p.mirostat != 0 {
            penalties::apply(&mut c, recent, pens);
            temperature::apply(&mut c, temp);
            let n_vocab = self.vocab.n_vocab().max(logits.len());
            let id = self.mirostat.sample(&mut c, n_vocab, &mut self.rng);
            self.keep_final(&c);
            return id;
        }
        // Greedy: samplers that always keep the most likely token can be skipped.
        let greedy = p.temperature <= 0.0 && p.dynatemp_range <= 0.0;
        for &kind in &p.samplers {
            match kind {
                SamplerKind::Penalties => penalties::apply(&mut c, recent, pens),
                SamplerKind::Dry => {
                    let d = dry::Dry {
                        multiplier: p.dry_multiplier,
                        base: p.dry_base,
                        allowed_length: p.dry_allowed_length,
                        penalty_last_n: p.dry_penalty_last_n,
                    };
                    dry::apply(&mut c, &d, &self.breakers, history, history.len());
                }
                SamplerKind::TopNSigma if !greedy => top_n_sigma::apply(&mut c, p.top_n_sigma),
                SamplerKind::TopK if !greedy => top_k::apply(&mut c, p.top_k),
                SamplerKind::TypicalP => typical::apply(&mut c, p.typical_p),
                SamplerKind::TopP if !greedy => top_p::apply(&mut c, p.top_p),
                SamplerKind::MinP if !greedy => min_p::apply(&mut c, p.min_p),
                SamplerKind::Xtc => {
                    let x = xtc::Xtc {
                        probability: p.xtc_probability,
                        threshold: p.xtc_threshold,
                    };
                    xtc::apply(&mut c, x, &mut self.rng);
                }
                SamplerKind::Temperature => temperature::apply(&mut c, temp),
                _ => {}
            }
        }
        self.keep_final(&c);
        if c.len() == 1 {
            return c.items[0].id;
        }
        c.draw(&mut self.rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(n: usize) -> Arc<TokenVocab> {
        let pieces = (0..n)
            .map(|i| format!("t{i}").into_bytes().into_boxed_slice())
            .collect();
        Arc::new(TokenVocab::from_pieces(pieces, vec![]))
    }

    #[test]
    fn greedy_picks_argmax_after_penalties() {
        let params = SamplingParams {
            temperature: 0.0,
            ..Default::default()
        };
        let mut s = Sampler::new(params.clone(), vocab(3));
        assert_eq!(s.sample(&[0.1, 3.0, 2.9], &[]), 1);
        let mut s = Sampler::new(
            SamplingParams {
                repeat_penalty: 1.1,
                ..params.clone()
            },
            vocab(3),
        );
        assert_eq!(s.sample(&[0.1, 3.0, 2.9], &[1]), 2);
        let mut s = Sampler::new(
            SamplingParams {
                logit_bias: vec![(0, 5.0)],
                ..params
            },
            vocab(3),
        );
        assert_eq!(s.sample(&[0.1, 3.0, 2.9], &[]), 0);
    }

    fn run(params: &SamplingParams, n: usize) -> Vec<u32> {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let mut s = Sampler::new(params.clone(), vocab(100));
        let mut history = Vec::new();
        for _ in 0..n {
            let t = s.sample(&logits, &history);
            history.push(t);
        }
        history
    }

    #[test]
    fn sample_with_probs_reports_what_the_chain_left() {
        let logits = [0.0, 3.0, 2.0, 1.0, -1.0];
        // Greedy: one token left, with probability 1.
        let greedy = SamplingParams {
            temperature: 0.0,
            ..Default::default()
        };
        let (id, dist) = Sampler::new(greedy, vocab(5)).sample_with_probs(&logits, &[]);
        assert_eq!((id, dist), (1, vec![(1, 1.0)]));
        // Top 2 at temperature 1: the softmax of those two, most likely first, and the draw
        // is one of them; the same seed draws the same token as `sample`.
        let top2 = SamplingParams {
            temperature: 1.0,
            top_k: 2,
            top_p: 1.0,
            min_p: 0.0,
            seed: 3,
            ..Default::default()
        };
        let (id, dist) = Sampler::new(top2.clone(), vocab(5)).sample_with_probs(&logits, &[]);
        assert_eq!(dist.iter().map(|d| d.0).collect::<Vec<_>>(), vec![1, 2]);
        let p1 = 1.0 / (1.0 + (-1.0f32).exp());
        assert!((dist[0].1 - p1).abs() < 1e-6 && (dist[1].1 - (1.0 - p1)).abs() < 1e-6);
        assert_eq!(id, Sampler::new(top2, vocab(5)).sample(&logits, &[]));
    }

    #[test]
    fn fixed_seed_reproduces_every_chain() {
        let base = SamplingParams {
            seed: 42,
            top_k: 0,
            min_p: 0.0,
            ..Default::default()
        };
        let variants = [
            base.clone(),
            SamplingParams {
                repeat_penalty: 1.3,
                frequency_penalty: 0.2,
                presence_penalty: 0.1,
                dry_multiplier: 0.8,
                top_n_sigma: 1.5,
                typical_p: 0.9,
                xtc_probability: 0.5,
                xtc_threshold: 0.05,
                dynatemp_range: 0.3,
                ..base.clone()
            },
            SamplingParams {
                mirostat: 1,
                ..base.clone()
            },
            SamplingParams {
                mirostat: 2,
                ..base.clone()
            },
        ];
        for v in &variants {
            let a = run(v, 50);
            assert_eq!(a, run(v, 50), "{v:?}");
            assert!(a.iter().any(|&t| t != a[0]), "sampling should vary: {v:?}");
            let other = SamplingParams {
                seed: 43,
                ..v.clone()
            };
            assert_ne!(a, run(&other, 50), "another seed, other tokens: {v:?}");
        }
    }

    #[test]
    fn sampler_order_matters() {
        // Typical-p before top-k can remove the most likely token (p = 0.3 among 70 tokens of
        // 0.01: its surprise is far below the entropy), after top-k 1 it cannot.
        let mut logits = vec![0.01f32.ln(); 71];
        logits[70] = 0.3f32.ln();
        let p = SamplingParams {
            top_k: 1,
            typical_p: 0.1,
            top_p: 1.0,
            min_p: 0.0,
            ..Default::default()
        };
        let kinds = |s: &str| SamplerKind::parse_list(s).unwrap();
        let first = |samplers| {
            let mut s = Sampler::new(
                SamplingParams {
                    samplers,
                    ..p.clone()
                },
                vocab(71),
            );
            s.sample(&logits, &[])
        };
        assert_eq!(first(kinds("top_k;typ_p;temperature")), 70);
        assert_ne!(first(kinds("typ_p;top_k;temperature")), 70);
        assert_eq!(
            SamplerKind::parse_letters("edskypmxt").unwrap(),
            SamplerKind::DEFAULT.to_vec()
        );
        assert!(SamplerKind::parse_list("top_k;bogus")
            .unwrap_err()
            .contains("bogus"));
    }

    #[test]
    fn grammar_constrains_and_ends() {
        let pieces: Vec<Box<[u8]>> = ["a", "b", "ab", "c", ""]
            .iter()
            .map(|s| s.as_bytes().into())
            .collect();
        let vocab = Arc::new(TokenVocab::from_pieces(pieces, vec![4]));
        let g = Arc::new(Grammar::parse(r#"root ::= "a" "b"+"#).unwrap());
        let params = SamplingParams {
            temperature: 0.0,
            grammar: Some(g),
            ..Default::default()
        };
        let mut s = Sampler::new(params, vocab);
        // "c" is most likely but not allowed; "a" is next best.
        assert_eq!(s.sample(&[1.0, 0.0, 0.5, 9.0, 8.0], &[]), 0);
        // EOG is not allowed before a "b".
        assert_eq!(s.sample(&[0.0, 1.0, 0.0, 9.0, 8.0], &[]), 1);
        // Now it is.
        assert_eq!(s.sample(&[0.0, 1.0, 0.0, 9.0, 8.0], &[]), 4);
    }

    /// A vocabulary of these pieces, the last one ending generation.
    fn words(pieces: &[&str]) -> Arc<TokenVocab> {
        let boxed = pieces.iter().map(|p| p.as_bytes().into()).collect();
        Arc::new(TokenVocab::from_pieces(
            boxed,
            vec![pieces.len() as u32 - 1],
        ))
    }

    /// Greedy over logits that prefer token `want[i]` at step `i`.
    fn prefer(s: &mut Sampler, n_vocab: usize, want: &[u32]) -> Vec<u32> {
        let mut out = Vec::new();
        for &w in want {
            let mut logits = vec![0.0; n_vocab];
            logits[w as usize] = 5.0;
            out.push(s.sample(&logits, &out));
        }
        out
    }

    #[test]
    fn a_lazy_grammar_holds_only_from_its_trigger() {
        // 0 "hi " 1 "<call>" 2 "x" 3 "y" 4 "</call>" 5 eog
        let v = words(&["hi ", "<call>", "x", "y", "</call>", ""]);
        let g = Grammar::parse(r#"root ::= "<call>" "x"+ "</call>""#).unwrap();
        let params = SamplingParams {
            temperature: 0.0,
            grammar: Some(Arc::new(g)),
            grammar_triggers: vec!["<call>".into()],
            ..Default::default()
        };
        let mut s = Sampler::new(params.clone(), v.clone());
        // Free before the trigger ("y" twice), held to "x" after it, then the call must close.
        assert_eq!(prefer(&mut s, 6, &[3, 0, 1, 3, 2, 4]), [3, 0, 1, 2, 2, 4]);
        // Not lazy: the same grammar refuses "y" and "hi " from the start.
        let eager = SamplingParams {
            grammar_triggers: vec![],
            ..params.clone()
        };
        let mut s = Sampler::new(eager, v.clone());
        assert_eq!(prefer(&mut s, 6, &[3, 0]), [1, 2]);
        // Never triggered: never held.
        let mut s = Sampler::new(params, v);
        assert_eq!(prefer(&mut s, 6, &[3, 3, 0]), [3, 3, 0]);
    }

    #[test]
    fn the_thinking_budget_forces_the_end_through_the_sampler() {
        // 0 "<think>" 1 "a" 2 "</think>" 3 "Done." 4 "b" 5 eog
        let v = words(&["<think>", "a", "</think>", "Done.", "b", ""]);
        let params = SamplingParams {
            temperature: 0.0,
            reasoning_budget: Some(BudgetSpec {
                start: vec![0],
                ends: vec![vec![2]],
                forced: vec![3, 2],
                tokens: 2,
                starts_inside: false,
            }),
            // The end tag triggers the grammar (but not while inside the thought).
            grammar: Some(Arc::new(
                Grammar::parse(r#"root ::= "</think>" "b"+"#).unwrap(),
            )),
            grammar_triggers: vec!["</think>".into()],
            ..Default::default()
        };
        let mut s = Sampler::new(params, v);
        let out = prefer(&mut s, 6, &[0, 1, 1, 1, 1, 1]);
        assert_eq!(out, [0, 1, 1, 3, 2, 4]);
        s.reset_grammar();
        let out = prefer(&mut s, 6, &[0, 1, 1]);
        let (id, probs) = s.sample_with_probs(&[0.0, 5.0, 0.0, 0.0, 0.0, 0.0], &out);
        assert_eq!((id, probs), (3, vec![(3, 1.0)]));
    }
}
