//! `GET /metrics` as llama-server serves it (its README's table and its own test suite's
//! cases): 501 without `--metrics`; with it the `Process-Start-Time-Unix` header, every
//! counter and gauge with its `# HELP` and `# TYPE`, prompt tokens counted apart from the
//! cached ones, tokens predicted as the requests' `timings` say, and a generation rate over
//! decode steps, the first token excluded.

use super::{get, start};
use crate::common::http::{post, Reply};
use serde_json::{json, Value};
use std::time::{SystemTime, UNIX_EPOCH};

/// `(type, value)` of each unlabelled metric, as llama-server's test reads them.
fn parse(text: &str) -> std::collections::HashMap<String, (String, f64)> {
    let mut types = std::collections::HashMap::new();
    let mut out = std::collections::HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            types.insert(name.to_string(), kind.to_string());
        } else if line.starts_with("llamacpp:") {
            let (name, value) = line.split_once(' ').unwrap();
            let kind = types
                .get(name)
                .unwrap_or_else(|| panic!("{name} has no # TYPE"));
            out.insert(name.to_string(), (kind.clone(), value.parse().unwrap()));
        }
    }
    out
}

fn scrape(port: u16) -> (Reply, std::collections::HashMap<String, (String, f64)>) {
    let r = get(port, "/metrics");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let text = String::from_utf8(r.body.clone()).unwrap();
    let m = parse(&text);
    (r, m)
}

fn complete(port: u16, prompt: &str, n_predict: u32) -> Value {
    let r = post(
        port,
        "/completion",
        &json!({"prompt": prompt, "n_predict": n_predict, "ignore_eos": true}),
    );
    assert_eq!(r.status, 200);
    r.json()["timings"].clone()
}

#[test]
fn without_the_flag_metrics_are_501() {
    let Some(srv) = start(&["-np", "1"]) else {
        return;
    };
    let r = get(srv.port, "/metrics");
    assert_eq!(r.status, 501);
    let e = &r.json()["error"];
    assert_eq!(e["code"], 501);
    assert_eq!(e["type"], "not_supported_error");
    assert_eq!(
        e["message"],
        "This server does not support metrics endpoint. Start it with `--metrics`"
    );
}

#[test]
fn names_types_and_the_start_time() {
    let Some(srv) = start(&["-np", "2", "--metrics"]) else {
        return;
    };
    complete(srv.port, "I believe", 8);
    let (r, m) = scrape(srv.port);
    assert_eq!(r.header("Content-Type"), Some("text/plain; version=0.0.4"));
    let started: u64 = r
        .header("Process-Start-Time-Unix")
        .expect("Process-Start-Time-Unix")
        .parse()
        .unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(started <= now && now - started < 600, "{started} vs {now}");
    let text = String::from_utf8_lossy(&r.body);
    for name in [
        "prompt_tokens_total",
        "prompt_tokens_cached_total",
        "prompt_seconds_total",
        "tokens_predicted_total",
        "tokens_predicted_seconds_total",
        "n_decode_total",
        "n_tokens_max",
        "spec_decode_num_draft_tokens_total",
        "spec_decode_num_accepted_tokens_total",
        "spec_decode_num_drafts_total",
    ] {
        let name = format!("llamacpp:{name}");
        assert_eq!(m[&name].0, "counter", "{name}");
        assert!(text.contains(&format!("# HELP {name} ")), "{name}");
    }
    for name in [
        "prompt_tokens_seconds",
        "predicted_tokens_seconds",
        "requests_processing",
        "requests_deferred",
        "n_busy_slots_per_decode",
    ] {
        let name = format!("llamacpp:{name}");
        assert_eq!(m[&name].0, "gauge", "{name}");
        assert!(text.contains(&format!("# HELP {name} ")), "{name}");
    }
    assert!(m["llamacpp:n_decode_total"].1 > 0.0);
    assert_eq!(m["llamacpp:requests_processing"].1, 0.0);
    assert!(m["llamacpp:prompt_seconds_total"].1 > 0.0);
}

#[test]
fn prompt_tokens_apart_from_cached_ones_and_tokens_predicted() {
    let Some(srv) = start(&["-np", "1", "--metrics"]) else {
        return;
    };
    let prompt = "the quick brown fox jumps over the lazy dog";
    let (mut processed, mut cached, mut predicted) = (0, 0, 0);
    for n in [1, 4, 16] {
        let t = complete(srv.port, prompt, n);
        processed += t["prompt_n"].as_u64().unwrap();
        cached += t["cache_n"].as_u64().unwrap();
        predicted += t["predicted_n"].as_u64().unwrap();
    }
    assert!(
        cached > 0,
        "the later requests reuse the first one's prompt"
    );
    let (_, m) = scrape(srv.port);
    assert_eq!(m["llamacpp:prompt_tokens_total"].1, processed as f64);
    assert_eq!(m["llamacpp:prompt_tokens_cached_total"].1, cached as f64);
    assert_eq!(m["llamacpp:tokens_predicted_total"].1, predicted as f64);
    assert_eq!(predicted, 21);
}

#[test]
fn the_generation_rate_leaves_out_the_first_token() {
    let Some(srv) = start(&["-np", "1", "--metrics"]) else {
        return;
    };
    // One token comes with the prompt's last pass: no decode step, no rate.
    complete(srv.port, "I believe", 1);
    let (_, m) = scrape(srv.port);
    assert_eq!(m["llamacpp:tokens_predicted_total"].1, 1.0);
    assert_eq!(m["llamacpp:predicted_tokens_seconds"].1, 0.0);
    // Sixteen tokens are fifteen steps over the time from the first to the last.
    let t = complete(srv.port, "I believe", 16);
    let secs = t["predicted_ms"].as_f64().unwrap() / 1e3;
    let (_, m) = scrape(srv.port);
    // (The reply's timings are read a moment before the request is counted as ended.)
    let rate = m["llamacpp:predicted_tokens_seconds"].1;
    assert!(
        (rate * secs / 15.0 - 1.0).abs() < 0.01,
        "{rate} vs {}",
        15.0 / secs
    );
    let total = m["llamacpp:tokens_predicted_seconds_total"].1;
    assert!((total / secs - 1.0).abs() < 0.01, "{total} vs {secs}");
    // The rate is over the time since the previous scrape: nothing since.
    let (_, m) = scrape(srv.port);
    assert_eq!(m["llamacpp:predicted_tokens_seconds"].1, 0.0);
    assert!(m["llamacpp:tokens_predicted_seconds_total"].1 > 0.0);
}
