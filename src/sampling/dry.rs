//! DRY ("don't repeat yourself"): penalises the token that would extend a repetition of an
//! earlier stretch of the context, by `multiplier * base^(length - allowed_length)`, where
//! `length` is how many of the latest tokens already repeat that earlier stretch. Sequence
//! breakers (by default newline, `:`, `"` and `*`) cut repetitions short, as in llama.cpp.
//!
//! The match lengths come from the Z-function of the reversed context, so each step is linear
//! in the window, never quadratic.

use super::Candidates;
use std::collections::HashMap;

/// DRY's settings; `multiplier == 0` disables it.
#[derive(Clone, Debug, PartialEq)]
pub struct Dry {
    pub multiplier: f32,
    pub base: f32,
    pub allowed_length: usize,
    /// Tokens looked back over (-1: the whole context, 0: off).
    pub penalty_last_n: i32,
}

/// Sequence breakers as token sequences: a breaker starts at a token (`head`) and continues
/// with `tail` (empty when the head token contains the whole breaker text).
#[derive(Clone, Debug, Default)]
pub struct Breakers {
    by_head: HashMap<u32, Vec<Vec<u32>>>,
}

/// Longest breaker tail kept, as llama.cpp does.
const MAX_TAIL: usize = 40;

impl Breakers {
    /// Maps breaker strings onto the vocabulary: every token whose text contains a breaker
    /// heads it with an empty tail; a token that ends with the breaker's first part heads it
    /// with the tokens of the rest (`tokenize`).
    pub fn new(
        breakers: &[String],
        pieces: &[Box<[u8]>],
        tokenize: impl Fn(&str) -> Vec<u32>,
    ) -> Breakers {
        let mut by_head: HashMap<u32, Vec<Vec<u32>>> = HashMap::new();
        for b in breakers.iter().filter(|b| !b.is_empty()) {
            let s = b.as_bytes();
            for (id, word) in pieces.iter().enumerate() {
                let id = id as u32;
                if contains(word, s) {
                    add_unique(by_head.entry(id).or_default(), Vec::new());
                    continue;
                }
                // The word ends with a proper prefix of the breaker: the rest is the tail.
                for start in 0..word.len() {
                    let overlap = word.len() - start;
                    if overlap < s.len() && word[start..] == s[..overlap] {
                        if let Ok(rest) = std::str::from_utf8(&s[overlap..]) {
                            let mut tail = tokenize(rest);
                            tail.truncate(MAX_TAIL);
                            add_unique(by_head.entry(id).or_default(), tail);
                        }
                    }
                }
            }
        }
        Breakers { by_head }
    }

    fn tails(&self, head: u32) -> Option<&Vec<Vec<u32>>> {
        self.by_head.get(&head)
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn add_unique(v: &mut Vec<Vec<u32>>, tail: Vec<u32>) {
    if !v.contains(&tail) {
        v.push(tail);
    }
}

/// Z-function: `z[k]` is the length of the longest common prefix of `s` and `s[k..]`.
fn z_function(s: &[u32]) -> Vec<usize> {
    let n = s.len();
    let mut z = vec![0; n];
    let (mut l, mut r) = (0, 0);
    for k in 1..n {
        if k < r {
            z[k] = z[k - l].min(r - k);
        }
        while k + z[k] < n && s[z[k]] == s[k + z[k]] {
            z[k] += 1;
        }
        if k + z[k] > r {
            l = k;
            r = k + z[k];
        }
    }
    z
}

/// Applies DRY given the context `history` and the context size (for `penalty_last_n = -1`).
pub fn apply(c: &mut Candidates, d: &Dry, breakers: &Breakers, history: &[u32], n_ctx: usize) {
    if d.multiplier == 0.0 || d.base < 1.0 || d.penalty_last_n == 0 {
        return;
    }
    let last_n = if d.penalty_last_n < 0 {
        n_ctx.max(history.len())
    } else {
        d.penalty_last_n as usize
    };
    let n = last_n.min(history.len());
    if n <= d.allowed_length {
        return;
    }
    // Newest first: rev[i] is the token i places before the end.
    let rev: Vec<u32> = history[history.len() - n..].iter().rev().copied().collect();

    // A breaker in the context bounds how far back a repetition may reach.
    let mut rep_limit = n;
    'scan: for i in 0..n {
        let Some(tails) = breakers.tails(rev[i]) else {
            continue;
        };
        let mut longest: Option<usize> = None;
        for tail in tails {
            let len = tail.len();
            if len > i || longest.is_some_and(|l| len <= l) {
                continue;
            }
            if (0..len).all(|o| tail[o] == rev[i - o - 1]) {
                longest = Some(len);
            }
        }
        if let Some(len) = longest {
            rep_limit = i - len;
            break 'scan;
        }
    }
    if rep_limit < d.allowed_length {
        return;
    }

    // z[k]: how many of the latest tokens also end k places earlier; the token that followed
    // that earlier stretch is rev[k - 1].
    let z = z_function(&rev);
    let mut max_repeat: HashMap<u32, usize> = HashMap::new();
    for k in 1..n {
        let len = z[k].min(rep_limit);
        if len >= d.allowed_length {
            let e = max_repeat.entry(rev[k - 1]).or_default();
            *e = (*e).max(len);
        }
    }
    if max_repeat.is_empty() {
        return;
    }
    const FLOAT_MAX_LOG: f32 = 88.722_84;
    let max_exponent = if d.base > 1.000_001 {
        (FLOAT_MAX_LOG / d.base.ln()) as usize
    } else {
        0
    };
    for item in c.items.iter_mut() {
        if let Some(&len) = max_repeat.get(&item.id) {
            let mut exp = len - d.allowed_length;
            if max_exponent > 0 {
                exp = exp.min(max_exponent);
            }
            item.logit -= d.multiplier * d.base.powi(exp as i32);
        }
    }
    c.sorted = false;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dry() -> Dry {
        Dry {
            multiplier: 1.0,
            base: 2.0,
            allowed_length: 2,
            penalty_last_n: -1,
        }
    }

    #[test]
    fn z_function_matches_naive() {
        let s = [1, 2, 1, 2, 1, 3, 1, 2];
        let z = z_function(&s);
        for k in 1..s.len() {
            let naive = (0..s.len() - k).take_while(|&i| s[i] == s[i + k]).count();
            assert_eq!(z[k], naive, "k={k}");
        }
    }

    #[test]
    fn penalises_the_token_that_extends_a_repeat() {
        // ... 5 6 7 8 | 5 6 7: the continuation 8 would repeat "5 6 7 8" (length 3 so far).
        let history = [1, 5, 6, 7, 8, 2, 5, 6, 7];
        let mut c = Candidates::from_logits(&[0.0; 10]);
        apply(&mut c, &dry(), &Breakers::default(), &history, 64);
        let l = c.logits();
        // length 3, allowed 2: penalty 1 * 2^(3-2) = 2
        assert_eq!(l[8], -2.0);
        assert!(
            l.iter().enumerate().all(|(i, &x)| i == 8 || x == 0.0),
            "{l:?}"
        );
    }

    #[test]
    fn short_repeats_and_breakers_are_spared() {
        let history = [1, 5, 6, 7, 8, 2, 5, 6, 7];
        // Allowed length 3: a repeat of 3 gets 1 * 2^0.
        let mut c = Candidates::from_logits(&[0.0; 10]);
        let d = Dry {
            allowed_length: 3,
            ..dry()
        };
        apply(&mut c, &d, &Breakers::default(), &history, 64);
        assert_eq!(c.logits()[8], -1.0);
        // Token 6 is a breaker: repeats cannot reach past it, so only "7" remains (too short).
        let pieces: Vec<Box<[u8]>> = (0..10u8)
            .map(|i| {
                if i == 6 {
                    b"\n".to_vec()
                } else {
                    vec![b'a' + i]
                }
                .into_boxed_slice()
            })
            .collect();
        let breakers = Breakers::new(&["\n".to_string()], &pieces, |_| Vec::new());
        let mut c = Candidates::from_logits(&[0.0; 10]);
        apply(&mut c, &dry(), &breakers, &history, 64);
        assert!(c.logits().iter().all(|&x| x == 0.0), "{:?}", c.logits());
    }
}
