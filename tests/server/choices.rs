//! `n` > 1 choices on the OpenAI endpoints, as llama-server's `n_cmpl`: each choice is its own
//! sequence with its own `index`; with a seed, choices differ from each other and choice 0 is
//! what `n` = 1 gives; streamed choices carry the same text as the body; usage counts every
//! choice's tokens; `n` outside 1..=128 is a 400 naming the field.

use super::events;
use crate::common::http::post;
use crate::common::server::Server;
use serde_json::json;

fn start() -> Option<Server> {
    super::start(&["-np", "2", "-c", "1024"])
}

#[test]
fn seeded_choices_differ_and_streams_match_bodies() {
    let Some(server) = start() else { return };
    let p = server.port;
    let chat = |n: u64, stream: bool| {
        json!({"messages": [{"role": "user", "content": "Tell me a story."}], "n": n,
               "max_tokens": 16, "temperature": 1.0, "seed": 42, "stream": stream,
               "ignore_eos": true, "stream_options": {"include_usage": true}})
    };
    let r = post(p, "/v1/chat/completions", &chat(3, false));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    let texts: Vec<String> = choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            assert_eq!(c["index"], i);
            assert_eq!(c["finish_reason"], "length");
            c["message"]["content"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(texts[0] != texts[1] && texts[1] != texts[2], "{texts:?}");
    assert_eq!(v["usage"]["completion_tokens"], 48);
    let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(v["usage"]["total_tokens"], prompt + 48);

    let one = post(p, "/v1/chat/completions", &chat(1, false)).json();
    assert_eq!(one["choices"][0]["message"]["content"], texts[0].as_str());

    let r = post(p, "/v1/chat/completions", &chat(3, true));
    let mut streamed = vec![String::new(); 3];
    let mut finished = [false; 3];
    let mut usage = None;
    for ev in events(&r) {
        if let Some(u) = ev.get("usage") {
            assert!(usage.is_none(), "one usage chunk");
            usage = Some(u.clone());
        }
        for c in ev["choices"].as_array().unwrap() {
            let i = c["index"].as_u64().unwrap() as usize;
            assert!(
                !finished[i],
                "no chunk for choice {i} after its finish_reason"
            );
            if let Some(t) = c["delta"]["content"].as_str() {
                streamed[i].push_str(t);
            }
            finished[i] |= c["finish_reason"].is_string();
        }
    }
    assert_eq!(streamed, texts);
    assert_eq!(finished, [true; 3]);
    assert_eq!(usage.expect("a usage chunk")["completion_tokens"], 48);

    let legacy = json!({"prompt": "Once upon a time", "n": 2, "max_tokens": 8,
                        "temperature": 1.0, "seed": 5, "ignore_eos": true});
    let v = post(p, "/v1/completions", &legacy).json();
    let c = v["choices"].as_array().unwrap();
    assert_eq!(
        (c[0]["index"].clone(), c[1]["index"].clone()),
        (json!(0), json!(1))
    );
    assert_ne!(c[0]["text"], c[1]["text"]);
    assert_eq!(v["usage"]["completion_tokens"], 16);
    let mut streamed = vec![String::new(); 2];
    let mut body = legacy.clone();
    body["stream"] = json!(true);
    for ev in events(&post(p, "/v1/completions", &body)) {
        for c in ev["choices"].as_array().unwrap() {
            streamed[c["index"].as_u64().unwrap() as usize] += c["text"].as_str().unwrap();
        }
    }
    assert_eq!(
        streamed,
        [
            c[0]["text"].as_str().unwrap(),
            c[1]["text"].as_str().unwrap()
        ]
    );
}

#[test]
fn n_out_of_range_names_the_field() {
    let Some(server) = start() else { return };
    for (path, body) in [
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}], "n": 0}),
        ),
        ("/v1/completions", json!({"prompt": "hi", "n": 129})),
        ("/v1/completions", json!({"prompt": "hi", "n": "two"})),
    ] {
        let r = post(server.port, path, &body);
        assert_eq!(r.status, 400, "{body}");
        assert_eq!(r.json()["error"]["param"], "n", "{body}");
    }
}
