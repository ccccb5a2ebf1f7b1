//! Wall-clock milestones of one command-line generation (model mapped, prompt evaluated, first
//! token out, last token out) and the summary `--verbose` prints on stderr at the end, in the
//! spirit of llama.cpp's performance report.

use std::time::{Duration, Instant};

/// Milestones measured from the moment the run started.
#[derive(Debug)]
pub struct RunClock {
    start: Instant,
    loaded: Option<Duration>,
    prompt_done: Option<Duration>,
    first_token: Option<Duration>,
    n_prompt: usize,
    n_gen: usize,
}

impl RunClock {
    /// A clock started now.
    pub fn start() -> RunClock {
        RunClock::started_at(Instant::now())
    }

    /// A clock started at `start`.
    pub fn started_at(start: Instant) -> RunClock {
        RunClock {
            start,
            loaded: None,
            prompt_done: None,
            first_token: None,
            n_prompt: 0,
            n_gen: 0,
        }
    }

    /// The model and tokenizer are ready.
    pub fn mark_loaded(&mut self) {
        self.loaded = Some(self.start.elapsed());
    }

    /// The prompt's `n` tokens have been evaluated.
    pub fn mark_prompt(&mut self, n: usize) {
        self.n_prompt = n;
        self.prompt_done = Some(self.start.elapsed());
    }

    /// One more token was generated (the first one also marks the time to first token).
    pub fn mark_token(&mut self) {
        if self.first_token.is_none() {
            self.first_token = Some(self.start.elapsed());
        }
        self.n_gen += 1;
    }

    /// The summary lines, with `now` as the end of generation.
    pub fn report(&self, now: Duration) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let rate = |n: usize, d: Duration| {
            if d.is_zero() {
                0.0
            } else {
                n as f64 / d.as_secs_f64()
            }
        };
        let loaded = self.loaded.unwrap_or_default();
        let prompt_done = self.prompt_done.unwrap_or(loaded);
        let prompt = prompt_done.saturating_sub(loaded);
        // Tokens after the first are the decode loop proper.
        let first = self.first_token.unwrap_or(prompt_done);
        let decode = now.saturating_sub(first);
        let n_decode = self.n_gen.saturating_sub(1);
        format!(
            "llamafile: load {:.1} ms | prompt {} tokens in {:.1} ms ({:.1} t/s) | first token at {:.1} ms | \
             generation {} tokens in {:.1} ms ({:.1} t/s) | total {:.1} ms",
            ms(loaded),
            self.n_prompt,
            ms(prompt),
            rate(self.n_prompt, prompt),
            ms(first),
            n_decode,
            ms(decode),
            rate(n_decode, decode),
            ms(now),
        )
    }

    /// The summary as of now.
    pub fn report_now(&self) -> String {
        self.report(self.start.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_splits_load_prompt_and_generation() {
        let t0 = Instant::now();
        let mut c = RunClock::started_at(t0);
        c.loaded = Some(Duration::from_millis(10));
        c.n_prompt = 50;
        c.prompt_done = Some(Duration::from_millis(110));
        c.first_token = Some(Duration::from_millis(111));
        c.n_gen = 11;
        let r = c.report(Duration::from_millis(211));
        assert!(r.contains("load 10.0 ms"), "{r}");
        assert!(
            r.contains("prompt 50 tokens in 100.0 ms (500.0 t/s)"),
            "{r}"
        );
        assert!(r.contains("first token at 111.0 ms"), "{r}");
        assert!(
            r.contains("generation 10 tokens in 100.0 ms (100.0 t/s)"),
            "{r}"
        );
        assert!(r.contains("total 211.0 ms"), "{r}");
    }

    #[test]
    fn marks_count_tokens_and_keep_the_first_time() {
        let mut c = RunClock::start();
        c.mark_loaded();
        c.mark_prompt(3);
        c.mark_token();
        let first = c.first_token;
        c.mark_token();
        assert_eq!(c.first_token, first);
        assert_eq!(c.n_gen, 2);
        assert_eq!(c.n_prompt, 3);
        assert!(!c.report_now().contains("NaN"));
    }
}
