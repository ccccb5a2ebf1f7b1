//! Lookup decoding (llama.cpp's `ngram-cache`): counts of which token followed each 1- to
//! 4-gram, kept for the context (updated as tokens come), and optionally loaded from a dynamic
//! cache file (earlier generations, `-lcd`) and a static one (2-grams of a large corpus,
//! `-lcs`). Each drafted token is the most frequent follower of the longest context n-gram
//! with enough samples and a clear enough majority (the dynamic cache asks for more of both),
//! with counts weighed by the static cache's; failing those, the static cache's own favourite.
//! At the end of a generation the context's counts are added to the dynamic cache and its file
//! is rewritten, as `llama-lookup` does.

use super::lookup_file;
use super::setup::SpecError;
use super::Drafter;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

/// Longest n-gram counted (and the key width of the files).
pub const NGRAM_MAX: usize = 4;
/// Shortest n-gram counted.
const NGRAM_MIN: usize = 1;
/// The static cache's n-grams.
const NGRAM_STATIC: usize = 2;
/// Most tokens drafted per step (llama.cpp's `ngram-cache` drafts 8).
pub const N_DRAFT: usize = 8;

/// An n-gram, padded with -1 after its tokens (the files' key layout).
pub type Ngram = [i32; NGRAM_MAX];
/// Follower token to count, in token order (ties go to the lowest id).
pub type Followers = BTreeMap<i32, i32>;
/// N-gram to the counts of the tokens that followed it.
pub type NgramCache = HashMap<Ngram, Followers>;

/// Thresholds per n-gram length: samples needed, and the favourite's share in percent.
struct Bar {
    samples: [i32; NGRAM_MAX],
    percent: [i32; NGRAM_MAX],
}
const LAX: Bar = Bar {
    samples: [2, 2, 1, 1],
    percent: [66, 50, 50, 50],
};
const STRICT: Bar = Bar {
    samples: [4, 3, 2, 2],
    percent: [75, 66, 66, 66],
};

fn ngram(tokens: &[u32]) -> Ngram {
    let mut g = [-1; NGRAM_MAX];
    for (slot, &t) in g.iter_mut().zip(tokens) {
        *slot = t as i32;
    }
    g
}

/// Counts the n-grams (`NGRAM_MIN..=NGRAM_MAX` long, or `sizes`) ending before each of the
/// last `new` tokens of `tokens`.
pub fn update(
    cache: &mut NgramCache,
    sizes: std::ops::RangeInclusive<usize>,
    tokens: &[u32],
    new: usize,
) {
    let len = tokens.len();
    for size in sizes {
        for i in len.saturating_sub(new).max(size)..len {
            let count = cache
                .entry(ngram(&tokens[i - size..i]))
                .or_default()
                .entry(tokens[i] as i32)
                .or_insert(0);
            *count = count.saturating_add(1);
        }
    }
}

/// Adds `from`'s counts to `into`.
pub fn merge(into: &mut NgramCache, from: &NgramCache) {
    for (g, followers) in from {
        let part = into.entry(*g).or_default();
        for (&t, &c) in followers {
            let count = part.entry(t).or_insert(0);
            *count = count.saturating_add(c);
        }
    }
}

/// The static cache's favourite after `g`, when it has the samples and the majority.
fn static_pick(statics: &NgramCache, g: &Ngram) -> Option<i32> {
    let part = statics.get(g)?;
    let (mut best, mut top, mut sum) = (None, 0i64, 0i64);
    for (&t, &c) in part {
        if i64::from(c) > top {
            (best, top) = (Some(t), i64::from(c));
        }
        sum += i64::from(c);
    }
    let i = NGRAM_STATIC - 1;
    (sum >= i64::from(LAX.samples[i]) && 100 * top >= i64::from(LAX.percent[i]) * sum)
        .then_some(best)
        .flatten()
}

/// The favourite after the longest of `grams` (shortest first) that passes `bar`, with counts
/// weighed by the static followers `statics`.
fn pick(
    cache: &NgramCache,
    grams: &[Ngram],
    statics: Option<&Followers>,
    bar: &Bar,
) -> Option<i32> {
    for (i, g) in grams.iter().enumerate().rev() {
        let Some(part) = cache.get(g) else {
            continue;
        };
        let (mut best, mut top, mut top_static, mut sum) = (None, 0i64, 0i64, 0i64);
        for (&t, &c) in part {
            let weight = statics
                .and_then(|s| s.get(&t))
                .map_or(1, |&s| 100 * i64::from(s));
            if i64::from(c) * weight > top * top_static {
                (best, top, top_static) = (Some(t), i64::from(c), weight);
            }
            sum += i64::from(c);
        }
        if sum < i64::from(bar.samples[i]) || 100 * top < i64::from(bar.percent[i]) * sum {
            continue;
        }
        return best;
    }
    None
}

/// Up to `n_draft` tokens to follow `ctx` (the context, its last sampled token included),
/// each from the caches as described atop this module; stops at the first token none of them
/// can propose.
pub fn draft(
    ctx: &[u32],
    n_draft: usize,
    context: &NgramCache,
    dynamic: &NgramCache,
    statics: &NgramCache,
) -> Vec<i32> {
    let mut out: Vec<i32> = Vec::new();
    if ctx.len() < NGRAM_STATIC {
        return out;
    }
    // The context and the draft so far, as one sequence.
    let mut seq: Vec<i32> = ctx.iter().map(|&t| t as i32).collect();
    while out.len() < n_draft {
        let end = seq.len();
        let tail = |size: usize| -> Ngram {
            let mut g = [-1; NGRAM_MAX];
            g[..size].copy_from_slice(&seq[end - size..end]);
            g
        };
        let g_static = tail(NGRAM_STATIC);
        let grams: Vec<Ngram> = (NGRAM_MIN..=NGRAM_MAX)
            .filter(|&s| s <= end)
            .map(tail)
            .collect();
        let part_static = statics.get(&g_static);
        let next = pick(context, &grams, part_static, &LAX)
            .or_else(|| pick(dynamic, &grams, part_static, &STRICT))
            .or_else(|| static_pick(statics, &g_static));
        match next {
            Some(t) => {
                out.push(t);
                seq.push(t);
            }
            None => break,
        }
    }
    out
}

/// The lookup-decoding drafter of one sequence.
pub struct NgramCacheDrafter {
    context: NgramCache,
    /// Context tokens counted so far.
    counted: usize,
    dynamic: Arc<NgramCache>,
    statics: Arc<NgramCache>,
    /// Where the dynamic cache is saved at the end (the CLI; the server only reads it).
    save_dynamic: Option<PathBuf>,
    /// Tokens at or above this are outside the model's vocabulary: a draft stops there.
    n_vocab: usize,
}

impl NgramCacheDrafter {
    pub fn new(
        dynamic: Arc<NgramCache>,
        statics: Arc<NgramCache>,
        save_dynamic: Option<PathBuf>,
        n_vocab: usize,
    ) -> Self {
        NgramCacheDrafter {
            context: NgramCache::new(),
            counted: 0,
            dynamic,
            statics,
            save_dynamic,
            n_vocab,
        }
    }
}

impl Drafter for NgramCacheDrafter {
    fn begin(&mut self, _prompt: &[u32]) {
        self.context.clear();
        self.counted = 0;
    }

    fn draft(&mut self, history: &[u32], last: u32, max: usize) -> Vec<u32> {
        let mut ctx = history.to_vec();
        ctx.push(last);
        if self.counted > ctx.len() {
            // (The context was shifted: count it again.)
            self.context.clear();
            self.counted = 0;
        }
        update(
            &mut self.context,
            NGRAM_MIN..=NGRAM_MAX,
            &ctx,
            ctx.len() - self.counted,
        );
        self.counted = ctx.len();
        draft(
            &ctx,
            N_DRAFT.min(max),
            &self.context,
            &self.dynamic,
            &self.statics,
        )
        .into_iter()
        .map_while(|t| {
            u32::try_from(t)
                .ok()
                .filter(|&t| (t as usize) < self.n_vocab)
        })
        .collect()
    }

    fn uses_draft_limits(&self) -> bool {
        false
    }

    fn finish(&mut self) -> Result<(), SpecError> {
        let Some(path) = &self.save_dynamic else {
            return Ok(());
        };
        let mut all = (*self.dynamic).clone();
        merge(&mut all, &self.context);
        lookup_file::save(&all, path).map_err(|e| SpecError::LookupCache(e.to_string()))?;
        self.dynamic = Arc::new(all);
        self.context.clear();
        self.counted = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_the_repeated_continuation() {
        let mut d = NgramCacheDrafter::new(Default::default(), Default::default(), None, 100);
        let history = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2];
        d.begin(&history);
        // After "... 1 2 3": 4 5 1 2 3 4 5 ... repeats, eight at most.
        assert_eq!(d.draft(&history, 3, 100), vec![4, 5, 1, 2, 3, 4, 5, 1]);
        assert_eq!(d.draft(&history, 3, 3), vec![4, 5, 1]);
        // A token never seen: nothing.
        assert!(d.draft(&history, 9, 100).is_empty());
    }

    #[test]
    fn the_dynamic_cache_needs_more_samples_and_vocab_bounds_hold() {
        let mut dynamic = NgramCache::new();
        update(&mut dynamic, 1..=4, &[7, 8, 7, 8, 7, 8, 7, 8, 7, 50], 10);
        let dynamic = Arc::new(dynamic);
        // "7" was followed by 8 four times and by 50 once: 80% of 5 samples passes.
        let mut d = NgramCacheDrafter::new(dynamic.clone(), Default::default(), None, 100);
        d.begin(&[]);
        assert_eq!(d.draft(&[3], 7, 1), vec![8]);
        // 8 and 50 are outside a 10-token vocabulary: no draft.
        let mut small = NgramCacheDrafter::new(dynamic, Default::default(), None, 8);
        small.begin(&[]);
        assert!(small.draft(&[3], 7, 4).is_empty());
    }

    #[test]
    fn static_counts_weigh_the_choice() {
        // After "9 1": 2 twice and 3 twice; a tie goes to the lower id ...
        let mut context = NgramCache::new();
        update(
            &mut context,
            2..=2,
            &[9, 1, 2, 9, 1, 2, 9, 1, 3, 9, 1, 3],
            12,
        );
        let none = NgramCache::new();
        assert_eq!(draft(&[9, 1], 1, &context, &none, &none), vec![2]);
        // ... unless the static cache has seen "9 1 3".
        let mut statics = NgramCache::new();
        update(&mut statics, 2..=2, &[9, 1, 3], 3);
        assert_eq!(draft(&[9, 1], 1, &context, &none, &statics), vec![3]);
        // The static cache alone drafts with two samples or more.
        assert!(draft(&[9, 1], 1, &none, &none, &statics).is_empty());
        update(&mut statics, 2..=2, &[9, 1, 3], 3);
        assert_eq!(draft(&[9, 1], 1, &none, &none, &statics), vec![3]);
    }
}
