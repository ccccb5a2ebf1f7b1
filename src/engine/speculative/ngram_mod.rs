//! Drafts from a hashed pool of n-grams (llama.cpp's `ngram-mod`): every `n_match` tokens of
//! the context are hashed to a slot of a fixed table holding the token that followed them; a
//! draft chains look-ups from the context's last `n_match` tokens, up to `n_max` tokens, and is
//! dropped when shorter than `n_min`. One pool serves every sequence (all server slots), so
//! what one request wrote helps the next; the pool is cleared when a quarter of it is in use
//! at a generation's start, or after five drafts in a row of which the target kept under a
//! quarter. Collisions only cost a rejected draft.

use super::Drafter;
use std::sync::{Arc, Mutex};

/// Slots in the pool (16 MiB of token ids).
const POOL_SLOTS: usize = 4 * 1024 * 1024;

/// The shared table: n-gram hash to the token that last followed it.
pub struct NgramPool {
    n: usize,
    entries: Vec<i32>,
    used: usize,
}

impl NgramPool {
    /// An empty pool of `n`-grams.
    pub fn new(n: usize) -> Self {
        Self::with_slots(n, POOL_SLOTS)
    }

    fn with_slots(n: usize, slots: usize) -> Self {
        NgramPool {
            n: n.max(1),
            entries: vec![-1; slots],
            used: 0,
        }
    }

    fn slot(&self, gram: &[u32]) -> usize {
        let h = gram.iter().fold(0u64, |h, &t| {
            h.wrapping_mul(6364136223846793005)
                .wrapping_add(u64::from(t))
        });
        (h % self.entries.len() as u64) as usize
    }

    /// Records that `window[n]` followed `window[..n]`.
    fn add(&mut self, window: &[u32]) {
        let i = self.slot(&window[..self.n]);
        if self.entries[i] < 0 {
            self.used += 1;
        }
        self.entries[i] = window[self.n] as i32;
    }

    fn get(&self, gram: &[u32]) -> Option<u32> {
        u32::try_from(self.entries[self.slot(gram)]).ok()
    }

    fn reset(&mut self) {
        self.entries.fill(-1);
        self.used = 0;
    }
}

/// One sequence's drafter over a shared [`NgramPool`].
pub struct NgramModDrafter {
    pool: Arc<Mutex<NgramPool>>,
    n_min: usize,
    n_max: usize,
    /// Context positions before this one are in the pool.
    added_to: usize,
    /// Length of the last draft.
    last_len: usize,
    /// Drafts in a row mostly rejected.
    low_streak: u32,
}

impl NgramModDrafter {
    pub fn new(pool: Arc<Mutex<NgramPool>>, n_min: usize, n_max: usize) -> Self {
        NgramModDrafter {
            pool,
            n_min,
            n_max,
            added_to: 0,
            last_len: 0,
            low_streak: 0,
        }
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, NgramPool> {
        // (A panic elsewhere while holding it leaves a table that is still well-formed.)
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drafter for NgramModDrafter {
    fn begin(&mut self, prompt: &[u32]) {
        self.added_to = 0;
        self.last_len = 0;
        let pool_arc = self.pool.clone();
        let mut pool = pool_arc.lock().unwrap_or_else(|e| e.into_inner());
        let n = pool.n;
        if prompt.len() < n {
            return;
        }
        for w in prompt.windows(n + 1) {
            pool.add(w);
        }
        self.added_to = prompt.len() - n;
        if pool.used * 4 > pool.entries.len() {
            pool.reset();
        }
    }

    fn draft(&mut self, history: &[u32], last: u32, max: usize) -> Vec<u32> {
        self.last_len = 0;
        let pool_arc = self.pool.clone();
        let mut pool = pool_arc.lock().unwrap_or_else(|e| e.into_inner());
        let (n, len) = (pool.n, history.len());
        if len < n {
            return Vec::new();
        }
        // New n-grams go in 32 positions at a time.
        if self.added_to + 32 < len {
            for i in self.added_to..len - n {
                pool.add(&history[i..i + n + 1]);
            }
            self.added_to = len - n;
        }
        let mut seq = history[len - n + 1..].to_vec();
        seq.push(last);
        for i in 0..self.n_max.min(max) {
            match pool.get(&seq[i..i + n]) {
                Some(t) => seq.push(t),
                None if i < self.n_min => return Vec::new(),
                None => break,
            }
        }
        let draft = seq.split_off(n);
        if draft.len() < self.n_min {
            return Vec::new();
        }
        self.last_len = draft.len();
        draft
    }

    fn accept(&mut self, n_accepted: usize) {
        if self.last_len == 0 {
            return;
        }
        if n_accepted * 4 < self.last_len {
            self.low_streak += 1;
            if self.low_streak >= 5 {
                self.pool().reset();
                self.low_streak = 0;
                self.added_to = 0;
            }
        } else {
            self.low_streak = 0;
        }
    }

    fn uses_draft_limits(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drafter(pool: &Arc<Mutex<NgramPool>>, n_min: usize, n_max: usize) -> NgramModDrafter {
        NgramModDrafter::new(pool.clone(), n_min, n_max)
    }

    #[test]
    fn chains_lookups_and_shares_the_pool() {
        let pool = Arc::new(Mutex::new(NgramPool::with_slots(2, 1 << 12)));
        let mut a = drafter(&pool, 1, 3);
        let prompt = [1, 2, 3, 4, 5, 6, 9];
        a.begin(&prompt);
        // "1 2" -> 3 -> 4 -> 5, three at most.
        assert_eq!(a.draft(&[9, 1], 2, 100), vec![3, 4, 5]);
        assert_eq!(a.draft(&[9, 1], 2, 2), vec![3, 4]);
        // Another sequence sees what the first one's prompt wrote.
        let mut b = drafter(&pool, 2, 8);
        b.begin(&[]);
        assert_eq!(b.draft(&[7, 4], 5, 100), vec![6, 9]);
        // Under n_min: nothing.
        assert!(b.draft(&[7, 5], 6, 100).is_empty());
    }

    #[test]
    fn mostly_rejected_drafts_clear_the_pool() {
        let pool = Arc::new(Mutex::new(NgramPool::with_slots(1, 1 << 12)));
        let mut d = drafter(&pool, 1, 4);
        d.begin(&[1, 2, 3, 4, 5]);
        for _ in 0..4 {
            assert_eq!(d.draft(&[1], 1, 100), vec![2, 3, 4, 5]);
            d.accept(0);
        }
        assert_eq!(d.draft(&[1], 1, 100), vec![2, 3, 4, 5]);
        d.accept(0);
        assert!(d.draft(&[1], 1, 100).is_empty());
        assert_eq!(pool.lock().unwrap().used, 0);
    }
}
