//! `--chat-template NAME` for llama.cpp's built-in formats, through `POST /apply-template`: a
//! few of the formats with quirks (a BOS inside the history, trimmed turns, a system prompt
//! folded into the first user turn, a default system turn, text past ASCII) render as
//! llama.cpp's `llm_chat_apply_template` writes them, and an unknown name is refused with the
//! list of names. (Every name is checked against llama.cpp's text in `chat::builtin`'s unit
//! tests, and against llama-server itself by `tools/builtin-templates-vs-llama.py`.)

use super::start;
use crate::common::http::post;
use crate::common::server::start_model;
use serde_json::json;
use std::process::Command;

#[test]
fn built_in_formats_render_as_llama_cpp() {
    let messages = json!([
        {"role": "system", "content": "Be brief.\n"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": " Hello! "},
        {"role": "user", "content": "Name a color."},
    ]);
    let cases = [
        ("llama2-sys-bos", "[INST] <<SYS>>\nBe brief.\n\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Name a color. [/INST]"),
        ("gemma", "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nName a color.<end_of_turn>\n<start_of_turn>model\n"),
        ("rwkv-world", "System: Be brief.\n\nUser: Hi\n\nAssistant: Hello!\n\nUser: Name a color.\n\nAssistant:"),
        ("deepseek3", "Be brief.\n\n\n<｜User｜>Hi<｜Assistant｜> Hello! <｜end▁of▁sentence｜><｜User｜>Name a color.<｜Assistant｜>"),
        ("yandex", " Пользователь: Hi\n\n Ассистент:  Hello! \n\n Пользователь: Name a color.\n\n Ассистент:[SEP]"),
    ];
    for (name, want) in cases {
        let Some(srv) = start(&["-np", "1", "--chat-template", name]) else {
            return;
        };
        let r = post(
            srv.port,
            "/apply-template",
            &json!({ "messages": messages }),
        );
        assert_eq!(
            r.status,
            200,
            "{name}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(r.json()["prompt"], want, "{name}");
    }
    // A format that writes no system turn of its own gets llama.cpp's default one.
    let Some(srv) = start_model(super::SMOLLM2, &["-np", "1", "--chat-template", "bailing2"])
    else {
        return;
    };
    let r = post(
        srv.port,
        "/apply-template",
        &json!({"messages": [{"role": "user", "content": "Hi"}]}),
    );
    assert_eq!(
        r.json()["prompt"],
        "<role>SYSTEM</role>detailed thinking off<|role_end|><role>HUMAN</role>Hi<|role_end|><role>ASSISTANT</role>"
    );
}

#[test]
fn an_unknown_name_is_refused_with_the_list() {
    let Some(model) = crate::common::model_path(super::SMOLLM2) else {
        return;
    };
    let out = Command::new(env!("CARGO_BIN_EXE_llamafile"))
        .arg("-m")
        .arg(&model)
        .args(["--nobrowser", "--port", "0", "--chat-template", "llama5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--chat-template \"llama5\""), "{err}");
    for name in [
        "bailing2",
        "gpt-oss",
        "kimi-k2",
        "mistral-v7-tekken",
        "solar-open",
    ] {
        assert!(err.contains(name), "{name} missing from: {err}");
    }
}

#[test]
fn help_lists_every_name() {
    let out = Command::new(env!("CARGO_BIN_EXE_llamafile"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let entry = help
        .split("--chat-template <")
        .nth(1)
        .expect("--help describes --chat-template");
    let entry = entry.split("[env:").next().unwrap();
    let listed: Vec<&str> = entry
        .split(['(', ')', ',', ' ', '\n'])
        .filter(|w| !w.is_empty())
        .collect();
    for name in llamafile::chat::builtin_names().split(", ") {
        assert!(
            listed.contains(&name),
            "--help does not list {name}: {entry}"
        );
    }
}
