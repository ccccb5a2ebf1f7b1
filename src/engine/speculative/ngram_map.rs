//! Drafts from a map of the context's n-grams (llama.cpp's `ngram-map-k` and `ngram-map-k4v`):
//! the context's last `size_n` tokens (the key) are looked up through a hash of the positions
//! where each key first occurred, and the `size_m` tokens that followed it there are proposed.
//! `ngram-map-k` drafts after any key seen before; `ngram-map-k4v` keeps, per key, counts of up
//! to four different continuations and drafts only for a key seen `min_hits` times whose most
//! frequent continuation outnumbers the others two to one. A key whose last draft was cut short
//! drafts no more than the target kept of it next time.
//!
//! The same choices as llama.cpp's (the hash, the order positions are entered and searched, the
//! statistics), so the two propose the same drafts; one difference: a new generation starts a
//! fresh map, where llama.cpp keeps what it learnt from the earlier prompt's prefix.

use super::Drafter;

/// Distinct continuations counted per key.
const MAX_VALUES: usize = 4;
/// Entries of the hash from a key to where it occurs.
const HASH_SIZE: usize = 1 << 18;
/// Counts saturate here.
const MAX_COUNT: u16 = 16380;

/// One continuation of a key: where it starts in the context, how often it followed the key,
/// and how many tokens of its last draft the target kept.
#[derive(Clone, Copy, Debug)]
struct Value {
    /// Start in the context (0: unused slot).
    at: usize,
    count: u16,
    accepted: usize,
}

/// A key seen in the context, with its statistics.
#[derive(Clone, Debug)]
struct Key {
    /// Where the key occurs (its tokens are read from the context there).
    at: usize,
    /// Continuations are counted up to this position.
    counted_to: usize,
    hits: u16,
    values: [Value; MAX_VALUES],
}

/// The n-gram map drafter.
pub struct NgramMapDrafter {
    /// Key length.
    size_n: usize,
    /// Draft (continuation) length.
    size_m: usize,
    /// `ngram-map-k`: draft after any key, without continuation statistics.
    key_only: bool,
    /// `ngram-map-k4v`: the key must have been looked up this many times.
    min_hits: u16,
    keys: Vec<Key>,
    /// Key hash to the context position of the key (0: none).
    hash: Vec<u32>,
    /// Positions up to here are entered in `hash`.
    hashed_to: usize,
    /// Length of the prompt of this generation.
    prompt_len: usize,
    /// The key and continuation slot of the last draft, for [`Drafter::accept`].
    last: Option<(usize, usize)>,
    /// Context length at the last draft (a shorter one means the context was shifted).
    seen: usize,
}

impl NgramMapDrafter {
    /// `key_only`: `ngram-map-k` (else `ngram-map-k4v`).
    pub fn new(size_n: usize, size_m: usize, min_hits: u16, key_only: bool) -> Self {
        NgramMapDrafter {
            size_n: size_n.max(1),
            size_m: size_m.max(1),
            key_only,
            min_hits,
            keys: Vec::new(),
            hash: vec![0; HASH_SIZE],
            hashed_to: 0,
            prompt_len: 0,
            last: None,
            seen: 0,
        }
    }

    /// Forgets the map: a generation starts after `prompt_len` tokens.
    fn reset(&mut self, prompt_len: usize) {
        self.keys.clear();
        self.hash.fill(0);
        self.hashed_to = 0;
        self.prompt_len = prompt_len;
        self.last = None;
        self.seen = prompt_len;
    }

    fn key_hash(tokens: impl Iterator<Item = u32>) -> usize {
        let h = tokens.fold(0u32, |h, t| h.wrapping_mul(2654435761).wrapping_add(t));
        h as usize % HASH_SIZE
    }

    /// Where the key `key` occurs earlier in `ctx`, followed by at least `size_m` tokens (0:
    /// nowhere): the hashed position first, then the positions not hashed yet, latest first.
    fn find(&self, ctx: &[u32], key: &[u32]) -> usize {
        let (n, m, len) = (self.size_n, self.size_m, ctx.len());
        let is_key = |j: usize| ctx[j..j + n] == *key;
        let limit = len - n - m - 1;
        let at = self.hash[Self::key_hash(key.iter().copied())] as usize;
        if at != 0 && at < limit && is_key(at) {
            return at;
        }
        if self.prompt_len > n + m + 1 {
            let top = self.prompt_len - n - m - 1;
            if let Some(j) = (self.hashed_to + 1..=top).rev().find(|&j| is_key(j)) {
                return j;
            }
        }
        let low = self.prompt_len.max(self.hashed_to) + 1;
        (low..=limit).rev().find(|&j| is_key(j)).unwrap_or(0)
    }

    /// Enters the positions not hashed yet, latest first; a hash slot keeps its first entry.
    fn extend_hash(&mut self, ctx: &[u32]) {
        let (n, m, len) = (self.size_n, self.size_m, ctx.len());
        let enter = |hash: &mut Vec<u32>, j: usize| {
            let slot = &mut hash[Self::key_hash(ctx[j..j + n].iter().copied())];
            if *slot == 0 {
                *slot = j as u32;
            }
        };
        if self.prompt_len > n + m + 1 {
            for j in (self.hashed_to + 1..=self.prompt_len - n - m - 1).rev() {
                enter(&mut self.hash, j);
            }
        }
        let limit = len - n - m - 1;
        for j in (self.prompt_len.max(self.hashed_to) + 1..=limit).rev() {
            enter(&mut self.hash, j);
        }
        self.hashed_to = self.hashed_to.max(limit);
    }

    /// Counts the continuations of the key at `at` from where counting stopped up to `at`.
    fn count_values(&mut self, ctx: &[u32], k: usize, at: usize) {
        let (n, m) = (self.size_n, self.size_m);
        let key = &mut self.keys[k];
        let key_tokens = &ctx[at..at + n];
        for i in key.counted_to..=at {
            if ctx[i..i + n] != *key_tokens {
                continue;
            }
            let start = i + n;
            let slot = key
                .values
                .iter()
                .position(|v| v.at == 0 || ctx[start..start + m] == ctx[v.at..v.at + m]);
            if let Some(v) = slot {
                let value = &mut key.values[v];
                if value.at == 0 {
                    *value = Value {
                        at: start,
                        count: 0,
                        accepted: m,
                    };
                }
                value.count = (value.count + 1).min(MAX_COUNT);
            }
        }
        key.counted_to = at;
    }
}

impl Drafter for NgramMapDrafter {
    fn begin(&mut self, prompt: &[u32]) {
        self.reset(prompt.len());
    }

    fn draft(&mut self, history: &[u32], last: u32, _max: usize) -> Vec<u32> {
        self.last = None;
        let (n, m, len) = (self.size_n, self.size_m, history.len());
        if len < self.seen {
            // The context was shifted: positions moved, so start over from what is there.
            self.reset(len);
        }
        self.seen = len;
        if len < 2 * n + m || len >= u32::MAX as usize || self.prompt_len > len {
            return Vec::new();
        }
        // The key: the context's last n tokens, `last` included.
        let mut key = history[len - n + 1..].to_vec();
        key.push(last);
        let at = self.find(history, &key);
        self.extend_hash(history);
        if at == 0 {
            return Vec::new();
        }
        let k = match self
            .keys
            .iter()
            .position(|e| history[e.at..e.at + n] == *key)
        {
            Some(k) => k,
            None => {
                self.keys.push(Key {
                    at,
                    counted_to: 0,
                    hits: 0,
                    values: [Value {
                        at: 0,
                        count: 0,
                        accepted: m,
                    }; MAX_VALUES],
                });
                self.keys.len() - 1
            }
        };
        self.keys[k].hits = (self.keys[k].hits + 1).min(MAX_COUNT);
        let slot = if self.key_only {
            0
        } else {
            if self.keys[k].hits < self.min_hits {
                return Vec::new();
            }
            self.count_values(history, k, at);
            let values = &self.keys[k].values;
            // The first most frequent continuation, against all the others together.
            let (best, top) = values.iter().enumerate().fold((0, 0), |(b, c), (i, v)| {
                if v.count > c {
                    (i, v.count)
                } else {
                    (b, c)
                }
            });
            let others: u32 = values
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != best)
                .map(|(_, v)| u32::from(v.count))
                .sum();
            if others > 0 && u32::from(top) < 2 * others {
                return Vec::new();
            }
            best
        };
        // (llama.cpp proposes what followed the key where it was found, whichever continuation
        // the statistics chose.)
        let take = m.min(self.keys[k].values[slot].accepted);
        self.last = Some((k, slot));
        history[at + n..at + n + take].to_vec()
    }

    fn accept(&mut self, n_accepted: usize) {
        if let Some((k, v)) = self.last.take() {
            self.keys[k].values[v].accepted = n_accepted;
        }
    }

    fn uses_draft_limits(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(d: &mut NgramMapDrafter, ctx: &[u32]) -> Vec<u32> {
        let (history, last) = ctx.split_at(ctx.len() - 1);
        d.draft(history, last[0], usize::MAX)
    }

    #[test]
    fn map_k_proposes_what_followed_the_key() {
        let mut d = NgramMapDrafter::new(2, 3, 1, true);
        // "1 2" at 1, followed by 3 4 5; the context ends with "1 2" again.
        let ctx = [9, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 1, 2];
        d.begin(&ctx[..ctx.len() - 1]);
        assert_eq!(run(&mut d, &ctx), vec![3, 4, 5]);
        // The target kept one: this key drafts one token from now on.
        d.accept(1);
        assert_eq!(run(&mut d, &ctx), vec![3]);
        d.accept(0);
        assert!(run(&mut d, &ctx).is_empty());
        // A shifted (shorter) context starts the map over instead of reading stale positions.
        assert!(run(&mut d, &ctx[4..]).is_empty());
        // A key never seen before drafts nothing.
        let other = [9, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13];
        d.begin(&other[..other.len() - 1]);
        assert!(run(&mut d, &other).is_empty());
    }

    #[test]
    fn map_k4v_wants_hits_and_a_clear_favourite() {
        // Twice "1 2 -> 3 4", once "1 2 -> 5 6".
        let ctx = [
            9, 1, 2, 3, 4, 0, 1, 2, 5, 6, 0, 1, 2, 3, 4, 0, 7, 8, 9, 10, 1, 2,
        ];
        let mut d = NgramMapDrafter::new(2, 2, 2, false);
        d.begin(&ctx[..ctx.len() - 1]);
        // First look-up: one hit, under min_hits.
        assert!(run(&mut d, &ctx).is_empty());
        // Second: "3 4" followed the key twice, "5 6" once: two to one is enough.
        assert_eq!(run(&mut d, &ctx), vec![3, 4]);
        // "1 2 -> 3 4" once and "1 2 -> 5 6" once: no favourite, no draft.
        let mut tie = NgramMapDrafter::new(2, 2, 1, false);
        let ctx2 = [9, 1, 2, 3, 4, 0, 1, 2, 5, 6, 0, 7, 8, 9, 10, 11, 1, 2];
        tie.begin(&ctx2[..ctx2.len() - 1]);
        assert!(run(&mut tie, &ctx2).is_empty());
    }
}
