//! Counters and gauges for `GET /metrics` (served with `--metrics`), in Prometheus' text
//! format, under llama-server's names, types, help texts and meanings, so existing dashboards
//! work: prompt tokens evaluated (cached ones apart) and the time the forward passes reading
//! them took; tokens generated and the time from each request's first token to its last; the
//! two rates as averages since the previous scrape, the generation rate over decode steps (a
//! request's first token comes with its prompt's last pass, so `n` tokens are `n - 1` steps).
//! A few counters of our own follow llama-server's.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// A monotonically increasing count, or a gauge that is set.
#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Tokens, the steps they took (a rate is steps over time), and seconds.
#[derive(Clone, Copy, Default, Debug)]
struct Bucket {
    tokens: u64,
    steps: u64,
    seconds: f64,
}

impl Bucket {
    fn add(&mut self, tokens: u64, steps: u64, seconds: f64) {
        self.tokens += tokens;
        self.steps += steps;
        self.seconds += seconds;
    }

    fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.steps as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// Prompt and generation totals since the start, and since the last scrape.
#[derive(Default, Debug)]
struct Times {
    prompt: Bucket,
    predict: Bucket,
    prompt_window: Bucket,
    predict_window: Bucket,
}

/// Everything `/metrics` reports.
#[derive(Debug)]
pub struct Metrics {
    /// Unix seconds when the server started (the `Process-Start-Time-Unix` header).
    pub started_unix: u64,
    /// Prompt tokens found in a slot's cache, not evaluated again.
    pub prompt_tokens_cached: Counter,
    pub n_decode: Counter,
    pub requests_processing: Counter,
    pub requests_deferred: Counter,
    pub requests_done: Counter,
    pub requests_cancelled: Counter,
    pub http_requests: Counter,
    pub http_errors: Counter,
    /// The most positions any slot has held (llama-server's `n_tokens_max`).
    pub n_tokens_max: Counter,
    /// Busy slots summed over forward passes (divided by `n_decode` for the average).
    busy_slots: Counter,
    /// Speculative decoding: drafted tokens, accepted ones, and verification steps.
    pub draft_tokens: Counter,
    pub draft_accepted: Counter,
    pub drafts: Counter,
    times: Mutex<Times>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            prompt_tokens_cached: Counter::default(),
            n_decode: Counter::default(),
            requests_processing: Counter::default(),
            requests_deferred: Counter::default(),
            requests_done: Counter::default(),
            requests_cancelled: Counter::default(),
            http_requests: Counter::default(),
            http_errors: Counter::default(),
            n_tokens_max: Counter::default(),
            busy_slots: Counter::default(),
            draft_tokens: Counter::default(),
            draft_accepted: Counter::default(),
            drafts: Counter::default(),
            times: Mutex::new(Times::default()),
        }
    }
}

impl Metrics {
    /// One forward pass that took `secs` and read `n_prompt` prompt tokens: as llama-server,
    /// a pass that read any prompt is prompt time, whole.
    pub fn record_step(&self, n_prompt: usize, secs: f64) {
        self.n_decode.add(1);
        if n_prompt == 0 {
            return;
        }
        if let Ok(mut t) = self.times.lock() {
            let n = n_prompt as u64;
            t.prompt.add(n, n, secs);
            t.prompt_window.add(n, n, secs);
        }
    }

    /// A request that ended (finished or cancelled) after generating `n_predicted` tokens, the
    /// last `predicted_ms` after the first, with `n_cached` prompt tokens found in the cache.
    pub fn record_request(&self, n_predicted: usize, predicted_ms: f64, n_cached: usize) {
        self.prompt_tokens_cached.add(n_cached as u64);
        if n_predicted == 0 {
            return;
        }
        if let Ok(mut t) = self.times.lock() {
            let (n, steps) = (n_predicted as u64, n_predicted as u64 - 1);
            t.predict.add(n, steps, predicted_ms / 1e3);
            t.predict_window.add(n, steps, predicted_ms / 1e3);
        }
    }

    /// After a forward pass: how many slots were busy, and the most positions one holds.
    pub fn record_slots(&self, busy: usize, max_tokens: usize) {
        self.busy_slots.add(busy as u64);
        self.n_tokens_max
            .0
            .fetch_max(max_tokens as u64, Ordering::Relaxed);
    }

    /// Tokens generated by the requests that have ended.
    pub fn tokens_predicted(&self) -> u64 {
        self.times.lock().map_or(0, |t| t.predict.tokens)
    }

    /// The Prometheus text exposition; the rates' window starts again, as llama-server's does
    /// at each scrape.
    pub fn render(&self) -> String {
        let (prompt, predict, prompt_rate, predict_rate) = match self.times.lock() {
            Ok(mut t) => {
                let rates = (t.prompt_window.rate(), t.predict_window.rate());
                t.prompt_window = Bucket::default();
                t.predict_window = Bucket::default();
                (t.prompt, t.predict, rates.0, rates.1)
            }
            Err(_) => Default::default(),
        };
        let n_decode = self.n_decode.get();
        let counters: [(&str, &str, f64); 10] = [
            (
                "prompt_tokens_total",
                "Number of prompt tokens processed, excluding cached tokens",
                prompt.tokens as f64,
            ),
            (
                "prompt_tokens_cached_total",
                "Number of prompt tokens reused from the cache",
                self.prompt_tokens_cached.get() as f64,
            ),
            (
                "prompt_seconds_total",
                "Total time spent processing prompts",
                prompt.seconds,
            ),
            (
                "tokens_predicted_total",
                "Number of generation tokens processed",
                predict.tokens as f64,
            ),
            (
                "tokens_predicted_seconds_total",
                "Total time spent generating tokens",
                predict.seconds,
            ),
            (
                "n_decode_total",
                "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
                n_decode as f64,
            ),
            (
                "n_tokens_max",
                "Largest observed sequence length (prompt + generation)",
                self.n_tokens_max.get() as f64,
            ),
            (
                "spec_decode_num_draft_tokens_total",
                "Speculative: Total draft tokens generated",
                self.draft_tokens.get() as f64,
            ),
            (
                "spec_decode_num_accepted_tokens_total",
                "Speculative: Total draft tokens accepted by the target model",
                self.draft_accepted.get() as f64,
            ),
            (
                "spec_decode_num_drafts_total",
                "Speculative: Total speculative decoding verification steps",
                self.drafts.get() as f64,
            ),
        ];
        let gauges: [(&str, &str, f64); 5] = [
            (
                "prompt_tokens_seconds",
                "Average prompt throughput in tokens/s",
                prompt_rate,
            ),
            (
                "predicted_tokens_seconds",
                "Average generation throughput in tokens/s",
                predict_rate,
            ),
            (
                "requests_processing",
                "Number of requests processing",
                self.requests_processing.get() as f64,
            ),
            (
                "requests_deferred",
                "Number of requests deferred",
                self.requests_deferred.get() as f64,
            ),
            (
                "n_busy_slots_per_decode",
                "Average number of busy slots per llama_decode() call",
                self.busy_slots.get() as f64 / n_decode.max(1) as f64,
            ),
        ];
        // Ours, beyond llama-server's.
        let extra: [(&str, &str, f64); 4] = [
            (
                "requests_completed_total",
                "Number of requests completed",
                self.requests_done.get() as f64,
            ),
            (
                "requests_cancelled_total",
                "Number of requests cancelled by their client",
                self.requests_cancelled.get() as f64,
            ),
            (
                "http_requests_total",
                "Number of HTTP requests answered",
                self.http_requests.get() as f64,
            ),
            (
                "http_errors_total",
                "Number of HTTP requests answered with 4xx or 5xx",
                self.http_errors.get() as f64,
            ),
        ];
        let mut out = String::new();
        let kinds = [
            ("counter", &counters[..]),
            ("gauge", &gauges),
            ("counter", &extra),
        ];
        for (kind, rows) in kinds {
            for (name, help, value) in rows {
                let _ = writeln!(out, "# HELP llamacpp:{name} {help}");
                let _ = writeln!(out, "# TYPE llamacpp:{name} {kind}");
                let _ = writeln!(out, "llamacpp:{name} {value}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, name: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("llamacpp:{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .parse()
            .unwrap()
    }

    #[test]
    fn exposition_has_help_type_and_value() {
        let m = Metrics::default();
        m.record_step(10, 0.5);
        m.record_step(0, 0.1);
        m.record_step(0, 0.1);
        m.record_request(3, 200.0, 4);
        m.record_slots(2, 40);
        m.record_slots(1, 12);
        let text = m.render();
        assert_eq!(value(&text, "n_tokens_max"), 40.0);
        assert_eq!(value(&text, "n_decode_total"), 3.0);
        assert_eq!(value(&text, "n_busy_slots_per_decode"), 1.0);
        assert_eq!(value(&text, "prompt_tokens_total"), 10.0);
        assert_eq!(value(&text, "prompt_tokens_cached_total"), 4.0);
        assert_eq!(value(&text, "prompt_seconds_total"), 0.5);
        assert_eq!(value(&text, "prompt_tokens_seconds"), 20.0);
        assert_eq!(value(&text, "tokens_predicted_total"), 3.0);
        assert_eq!(value(&text, "tokens_predicted_seconds_total"), 0.2);
        // Three tokens are two decode steps: 2 / 0.2 s.
        assert_eq!(value(&text, "predicted_tokens_seconds"), 10.0);
        assert!(
            text.contains("# TYPE llamacpp:n_decode_total counter\nllamacpp:n_decode_total 3\n")
        );
        assert!(text.contains("# TYPE llamacpp:requests_deferred gauge\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (name, value) = line.split_once(' ').unwrap();
            assert!(name.starts_with("llamacpp:"));
            value.parse::<f64>().unwrap();
        }
        // The rates cover the time since the last scrape; the totals stay.
        let text = m.render();
        assert_eq!(value(&text, "prompt_tokens_seconds"), 0.0);
        assert_eq!(value(&text, "predicted_tokens_seconds"), 0.0);
        assert_eq!(value(&text, "prompt_tokens_total"), 10.0);
        // A one-token reply is no decode step: no rate, but its token counts.
        m.record_request(1, 0.0, 0);
        let text = m.render();
        assert_eq!(value(&text, "predicted_tokens_seconds"), 0.0);
        assert_eq!(value(&text, "tokens_predicted_total"), 4.0);
    }
}
