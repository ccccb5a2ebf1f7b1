//! Thoughts in chat replies (`--reasoning-format`, a request's `reasoning_format`): a template
//! that opens `<think>` at the generation prompt leaves SmolLM2 thinking until it writes
//! `</think>` (it never does), so its whole reply is reasoning: `reasoning_content`, streamed as
//! `delta.reasoning_content`, with empty content; `none` leaves it all in the content.
//! `--reasoning off` and `--reasoning-budget 0` give templates `enable_thinking = false`.

use crate::common::http::post;
use crate::{events, start};
use serde_json::json;

const THINKING: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";

fn chat(extra: serde_json::Value) -> serde_json::Value {
    let mut body = json!({
        "messages": [{"role": "user", "content": "Why is the sky blue?"}],
        "temperature": 0,
        "max_tokens": 12,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[test]
fn an_opened_thought_is_reasoning_content() {
    let Some(s) = start(&["--chat-template", THINKING]) else {
        return;
    };
    let v = post(s.port, "/v1/chat/completions", &chat(json!({}))).json();
    let m = &v["choices"][0]["message"];
    let thought = m["reasoning_content"].as_str().expect("reasoning_content");
    assert!(!thought.is_empty(), "{v}");
    assert_eq!(m["content"], "", "{v}");

    // The same thought, streamed as reasoning deltas.
    let r = post(
        s.port,
        "/v1/chat/completions",
        &chat(json!({"stream": true})),
    );
    let evs = events(&r);
    let streamed: String = evs
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert_eq!(streamed.trim_end(), thought, "{evs:?}");
    let content: String = evs
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "");

    // `none` keeps it all in the content, as written.
    let v = post(
        s.port,
        "/v1/chat/completions",
        &chat(json!({"reasoning_format": "none"})),
    )
    .json();
    let m = &v["choices"][0]["message"];
    assert!(m.get("reasoning_content").is_none(), "{v}");
    // (As written: with the newline the thought starts with, which reasoning_content drops.)
    assert_eq!(m["content"].as_str().unwrap().trim(), thought);

    let r = post(
        s.port,
        "/v1/chat/completions",
        &chat(json!({"reasoning_format": "sideways"})),
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "reasoning_format");
}

#[test]
fn the_server_format_flag_and_thinking_switches() {
    let Some(s) = start(&["--chat-template", THINKING, "--reasoning-format", "none"]) else {
        return;
    };
    let v = post(s.port, "/v1/chat/completions", &chat(json!({}))).json();
    assert!(
        v["choices"][0]["message"]
            .get("reasoning_content")
            .is_none(),
        "{v}"
    );
    drop(s);

    let shows =
        "{{ enable_thinking is defined and enable_thinking == false }}|{{ messages[0].content }}";
    for flags in [
        &["--reasoning", "off"][..],
        &["--reasoning-budget", "0"],
        &["-rea", "off"],
    ] {
        let mut args = vec!["--chat-template", shows];
        args.extend_from_slice(flags);
        let Some(s) = start(&args) else { return };
        let body = json!({"messages": [{"role": "user", "content": "x"}]});
        let prompt = post(s.port, "/apply-template", &body).json()["prompt"].clone();
        assert_eq!(prompt, "True|x", "{flags:?}");
        // A request's own kwargs win.
        let body = json!({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"enable_thinking": true}});
        let prompt = post(s.port, "/apply-template", &body).json()["prompt"].clone();
        assert_eq!(prompt, "False|x", "{flags:?}");
    }
}

/// `--chat-template-kwargs` gives every template its variables; a request's own win, and a
/// value that is not a JSON object is refused at start.
#[test]
fn chat_template_kwargs_flag() {
    let shows = "{{ who }}/{{ enable_thinking }}|{{ messages[0].content }}";
    let kwargs = r#"{"who": "flag", "enable_thinking": true}"#;
    let args = [
        "--chat-template",
        shows,
        "--chat-template-kwargs",
        kwargs,
        "--reasoning",
        "off",
    ];
    let Some(s) = start(&args) else { return };
    let body = json!({"messages": [{"role": "user", "content": "x"}]});
    let prompt = post(s.port, "/apply-template", &body).json()["prompt"].clone();
    assert_eq!(prompt, "flag/True|x");
    let body = json!({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"who": "request"}});
    let prompt = post(s.port, "/apply-template", &body).json()["prompt"].clone();
    assert_eq!(prompt, "request/True|x");
    drop(s);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llamafile"))
        .args(["-m", "/nonexistent.gguf", "--chat-template-kwargs", "[1]"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("--chat-template-kwargs: expected a JSON object"),
        "{err}"
    );
}

/// A thinking budget: the thought SmolLM2 never ends is closed after N tokens by forcing the
/// budget message and `</think>`, and the reply goes on as content. From the flag
/// (`--reasoning-budget`, `--reasoning-budget-message`) or the request's
/// `reasoning_budget_tokens` and `reasoning_budget_message`.
#[test]
fn a_spent_thinking_budget_closes_the_thought() {
    let flags = [
        "--chat-template",
        THINKING,
        "--reasoning-budget",
        "4",
        "--reasoning-budget-message",
        " Time is up.",
    ];
    let Some(s) = start(&flags) else { return };
    let body = chat(json!({"max_tokens": 24}));
    let v = post(s.port, "/v1/chat/completions", &body).json();
    let message = &v["choices"][0]["message"];
    let reasoning = message["reasoning_content"].as_str().unwrap();
    assert!(reasoning.ends_with(" Time is up."), "{v}");
    // Unbudgeted, this thought runs to the limit; closed, the model goes on to its answer
    // (SmolLM2 ends there at once).
    let content = message["content"].as_str().unwrap();
    assert!(
        !content.is_empty() || v["choices"][0]["finish_reason"] == "stop",
        "{v}"
    );
    assert!(!reasoning.contains("</think>"), "{v}");

    // The request's own budget and message win; -1 keeps the server's.
    let own = chat(
        json!({"max_tokens": 24, "reasoning_budget_tokens": 1, "reasoning_budget_message": " Done."}),
    );
    let v = post(s.port, "/v1/chat/completions", &own).json();
    let reasoning = v["choices"][0]["message"]["reasoning_content"]
        .as_str()
        .unwrap();
    assert!(reasoning.ends_with("Done."), "{v}");
    assert!(reasoning.len() < " Time is up.".len() + 40, "{v}");
    let same = chat(json!({"max_tokens": 24, "reasoning_budget_tokens": -1}));
    let again = post(s.port, "/v1/chat/completions", &same).json();
    assert_eq!(
        again["choices"][0]["message"],
        message.clone(),
        "-1 is the server's budget"
    );
    let bad = chat(json!({"reasoning_budget_tokens": -2}));
    let r = post(s.port, "/v1/chat/completions", &bad);
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "reasoning_budget_tokens");
}
