//! Counters for `GET /metrics`, in Prometheus' text format, named as llama-server names them
//! (`llamacpp:prompt_tokens_total`, ...) so existing dashboards work.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

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

/// Everything `/metrics` reports.
#[derive(Default, Debug)]
pub struct Metrics {
    pub prompt_tokens: Counter,
    pub tokens_predicted: Counter,
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
    /// Seconds spent in forward passes that read prompts, and in those that only decoded.
    seconds: Mutex<(f64, f64)>,
}

impl Metrics {
    /// One forward pass of `n_prompt` prompt tokens and `n_decode` generated ones.
    pub fn record_step(&self, n_prompt: usize, n_decode: usize, secs: f64) {
        self.prompt_tokens.add(n_prompt as u64);
        self.n_decode.add(1);
        if let Ok(mut s) = self.seconds.lock() {
            // A mixed pass is charged to prompt processing and decoding in proportion.
            let total = (n_prompt + n_decode).max(1) as f64;
            s.0 += secs * n_prompt as f64 / total;
            s.1 += secs * n_decode as f64 / total;
        }
    }

    /// After a forward pass: how many slots were busy, and the most positions one holds.
    pub fn record_slots(&self, busy: usize, max_tokens: usize) {
        self.busy_slots.add(busy as u64);
        self.n_tokens_max
            .0
            .fetch_max(max_tokens as u64, Ordering::Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let (prompt_s, decode_s) = self.seconds.lock().map(|s| *s).unwrap_or_default();
        let rate = |n: u64, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
        let n_decode = self.n_decode.get();
        let busy_per_decode = if n_decode > 0 {
            self.busy_slots.get() as f64 / n_decode as f64
        } else {
            0.0
        };
        let rows: [(&str, &str, &str, f64); 17] = [
            (
                "prompt_tokens_total",
                "counter",
                "Number of prompt tokens processed.",
                self.prompt_tokens.get() as f64,
            ),
            (
                "prompt_seconds_total",
                "counter",
                "Prompt process time.",
                prompt_s,
            ),
            (
                "tokens_predicted_total",
                "counter",
                "Number of generation tokens processed.",
                self.tokens_predicted.get() as f64,
            ),
            (
                "tokens_predicted_seconds_total",
                "counter",
                "Predict process time.",
                decode_s,
            ),
            (
                "n_decode_total",
                "counter",
                "Total number of forward passes.",
                self.n_decode.get() as f64,
            ),
            (
                "prompt_tokens_seconds",
                "gauge",
                "Average prompt throughput in tokens/s.",
                rate(self.prompt_tokens.get(), prompt_s),
            ),
            (
                "predicted_tokens_seconds",
                "gauge",
                "Average generation throughput in tokens/s.",
                rate(self.tokens_predicted.get(), decode_s),
            ),
            (
                "n_tokens_max",
                "counter",
                "High watermark of the context size observed.",
                self.n_tokens_max.get() as f64,
            ),
            (
                "n_busy_slots_per_decode",
                "gauge",
                "Average number of busy slots per forward pass.",
                busy_per_decode,
            ),
            (
                "spec_decode_num_draft_tokens_total",
                "counter",
                "Total draft tokens generated (0 when speculative decoding is off).",
                self.draft_tokens.get() as f64,
            ),
            (
                "spec_decode_num_accepted_tokens_total",
                "counter",
                "Total draft tokens accepted by the target model.",
                self.draft_accepted.get() as f64,
            ),
            (
                "spec_decode_num_drafts_total",
                "counter",
                "Total speculative decoding verification steps.",
                self.drafts.get() as f64,
            ),
            (
                "requests_processing",
                "gauge",
                "Number of requests processing.",
                self.requests_processing.get() as f64,
            ),
            (
                "requests_deferred",
                "gauge",
                "Number of requests deferred.",
                self.requests_deferred.get() as f64,
            ),
            (
                "requests_completed_total",
                "counter",
                "Number of requests completed.",
                self.requests_done.get() as f64,
            ),
            (
                "requests_cancelled_total",
                "counter",
                "Number of requests cancelled by their client.",
                self.requests_cancelled.get() as f64,
            ),
            (
                "http_requests_total",
                "counter",
                "Number of HTTP requests answered.",
                self.http_requests.get() as f64,
            ),
        ];
        let mut out = String::new();
        for (name, kind, help, value) in rows {
            let _ = writeln!(out, "# HELP llamacpp:{name} {help}");
            let _ = writeln!(out, "# TYPE llamacpp:{name} {kind}");
            let _ = writeln!(out, "llamacpp:{name} {value}");
        }
        let _ = writeln!(
            out,
            "# HELP llamacpp:http_errors_total Number of HTTP requests answered with 4xx or 5xx."
        );
        let _ = writeln!(out, "# TYPE llamacpp:http_errors_total counter");
        let _ = writeln!(out, "llamacpp:http_errors_total {}", self.http_errors.get());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_help_type_and_value() {
        let m = Metrics::default();
        m.record_step(10, 0, 0.5);
        m.record_step(0, 2, 0.1);
        m.tokens_predicted.add(2);
        m.record_slots(2, 40);
        m.record_slots(1, 12);
        let text = m.render();
        assert!(text.contains("llamacpp:n_tokens_max 40\n"), "{text}");
        assert!(
            text.contains("llamacpp:n_busy_slots_per_decode 1.5\n"),
            "{text}"
        );
        assert!(text.contains("llamacpp:prompt_tokens_total 10\n"), "{text}");
        assert!(
            text.contains("llamacpp:prompt_tokens_seconds 20\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE llamacpp:n_decode_total counter\nllamacpp:n_decode_total 2\n")
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (name, value) = line.split_once(' ').unwrap();
            assert!(name.starts_with("llamacpp:"));
            value.parse::<f64>().unwrap();
        }
    }
}
