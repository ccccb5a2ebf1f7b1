//! The server with a projector, as llama-server with `--mmproj`: an OpenAI chat request with an
//! `image_url` part (a base64 `data:` URL) on the synthetic LLaVA pair answers with
//! llama-mtmd-cli's greedy text (tests/data/vision/cli.json: the same prompt as the CLI's first
//! case), counts the image's tokens in `usage`, and reuses the slot's cache for the same image
//! in the same place but not for another image; `/props` reports vision; bad parts are 400s
//! naming the part, with the server alive; `/completion`'s `multimodal_data` gives the same
//! text; without a projector an image is a 400 worded as llama-server's. SmolVLM's tiles (with
//! the text between them) go through the slots the same way: llama-mtmd-cli's greedy text
//! (tests/data/vision/greedy.json), and the same image again reuses the whole prefix. A slot
//! holding a Gemma 3 image (its rows read both ways) is saved, restored by another server
//! process, and the same request there reuses it and gives llama-mtmd-cli's text.

mod common;

use common::http::post;
use common::image_chat::{answers_twice, data_url, greedy_case};
use common::llava;
use serde_json::{json, Value};

/// "Describe." after the image at `url`.
fn ask(url: &str) -> Value {
    common::image_chat::ask(url, "Describe.")
}

#[test]
fn chat_with_an_image_matches_llama_mtmd_cli() {
    let Some((text, mmproj)) = llava::pair() else {
        return;
    };
    let mm = mmproj.to_str().unwrap();
    let srv = common::server::start_with(
        &text,
        &["--mmproj", mm, "--chat-template", "vicuna", "-np", "1"],
    );
    let url = data_url(&llava::picture_png(84, 84));
    let want = &llava::cli_cases()[0].2;
    // "USER: " and "Describe.\nASSISTANT:" around 6×6 image tokens; the same image in the
    // same place again: all but the last position comes from the cache.
    let n_prompt = answers_twice(srv.port, &ask(&url), &json!(want));
    assert!(n_prompt > 36, "{n_prompt}");
    // Another image there: only the text before it is reused.
    let other = data_url(&llava::picture_png(84, 83));
    let third = post(srv.port, "/v1/chat/completions", &ask(&other)).json();
    let cached = third["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    assert!(cached.unwrap() < 36, "{third}");

    let props = common::http::send("127.0.0.1", srv.port, "GET", "/props", &[], "");
    assert_eq!(props.json()["modalities"]["vision"], json!(true));
    let models = common::http::send("127.0.0.1", srv.port, "GET", "/v1/models", &[], "");
    let caps = &models.json()["models"][0]["capabilities"];
    assert_eq!(caps, &json!(["completion", "multimodal"]), "{caps}");

    let huge = data_url(&llava::huge_png());
    let bad = [
        (huge.as_str(), "9000×10 pixels is larger than"),
        ("https://example.com/a.png", "offline"),
        ("data:image/png;base64,AAAA", "unknown image format"),
        ("data:text/plain;base64,AAAA", "Invalid uri format"),
        ("data:image/png;base64,@@", "Invalid base64"),
    ];
    for (url, needle) in bad {
        let r = post(srv.port, "/v1/chat/completions", &ask(url));
        assert_eq!(r.status, 400, "{url}");
        let e = r.json();
        assert_eq!(
            e["error"]["param"],
            json!("messages[0].content[0].image_url")
        );
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{msg}");
    }
    let alive = post(srv.port, "/v1/chat/completions", &ask(&url));
    assert_eq!(alive.status, 200);

    // `/completion` with llama-server's prompt object: the vicuna text with the marker.
    let b64 = url.split_once(',').unwrap().1;
    let body = json!({
        "prompt": {
            "prompt_string": "USER: <__media__>Describe.\nASSISTANT:",
            "multimodal_data": [b64],
        },
        "n_predict": 12,
        "temperature": 0,
    });
    let r = post(srv.port, "/completion", &body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["content"], json!(want));
    let two = json!({"prompt": {"prompt_string": "<__media__>", "multimodal_data": [b64, b64]}});
    let r = post(srv.port, "/completion", &two);
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], json!("prompt.prompt_string"));
}

#[test]
fn an_image_without_a_projector_is_refused_as_llama_server_does() {
    let Some((text, _)) = llava::pair() else {
        return;
    };
    let srv = common::server::start_with(&text, &["--chat-template", "vicuna"]);
    let r = post(
        srv.port,
        "/v1/chat/completions",
        &ask("data:image/png;base64,AAAA"),
    );
    assert_eq!(r.status, 400);
    let e = r.json();
    assert_eq!(e["error"]["param"], json!("messages[0].content[0]"));
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"));
    let props = common::http::send("127.0.0.1", srv.port, "GET", "/props", &[], "");
    assert_eq!(props.json()["modalities"]["vision"], json!(false));
    let models = common::http::send("127.0.0.1", srv.port, "GET", "/v1/models", &[], "");
    let caps = &models.json()["models"][0]["capabilities"];
    assert_eq!(caps, &json!(["completion"]), "{caps}");
    let body = json!({"prompt": {"prompt_string": "<__media__>", "multimodal_data": ["AAAA"]}});
    let r = post(srv.port, "/completion", &body);
    assert_eq!(r.status, 400);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("does not support multimodal requests"),
        "{msg}"
    );
}

#[test]
fn smolvlm_tiles_answer_as_llama_mtmd_cli() {
    let Some((text, mmproj)) = llava::family_pair("smolvlm") else {
        return;
    };
    // The first SmolVLM case: "Describe." after the 130×50 picture (2×1 tiles and the overview).
    let case = greedy_case("smolvlm");
    assert_eq!(case["pictures"], json!(["130x50"]));
    let mm = mmproj.to_str().unwrap();
    let srv = common::server::start_with(
        &text,
        &["--mmproj", mm, "--chat-template", "chatml", "-np", "1"],
    );
    let url = data_url(&llava::picture_png(130, 50));
    // Three inputs of 16 rows, and the text around them.
    let n_prompt = answers_twice(srv.port, &ask(&url), &case["text"]);
    assert!(n_prompt > 48, "{n_prompt}");
}

#[test]
fn a_slot_with_a_gemma3_image_is_saved_and_restored() {
    let Some((text, mmproj)) = llava::family_pair("gemma3") else {
        return;
    };
    // "Describe." after the 224×224 picture.
    let case = greedy_case("gemma3");
    assert_eq!(case["pictures"], json!(["224x224"]));
    let dir = std::env::temp_dir().join(format!("llamafile-vision-slots-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let args = [
        "--mmproj",
        mmproj.to_str().unwrap(),
        "--chat-template",
        "gemma",
        "-np",
        "1",
        "--slot-save-path",
        dir.to_str().unwrap(),
    ];
    let url = data_url(&llava::picture_png(224, 224));
    let a = common::server::start_with(&text, &args);
    let first = post(a.port, "/v1/chat/completions", &ask(&url));
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let first = first.json();
    assert_eq!(first["choices"][0]["message"]["content"], case["text"]);
    let n_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    let saved = post(
        a.port,
        "/slots/0?action=save",
        &json!({"filename": "image.bin"}),
    );
    assert_eq!(
        saved.status,
        200,
        "{}",
        String::from_utf8_lossy(&saved.body)
    );
    drop(a);
    let b = common::server::start_with(&text, &args);
    let restored = post(
        b.port,
        "/slots/0?action=restore",
        &json!({"filename": "image.bin"}),
    );
    assert_eq!(
        restored.status,
        200,
        "{}",
        String::from_utf8_lossy(&restored.body)
    );
    assert!(restored.json()["n_restored"].as_u64().unwrap() >= n_prompt);
    let again = post(b.port, "/v1/chat/completions", &ask(&url)).json();
    assert_eq!(again["choices"][0]["message"]["content"], case["text"]);
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    assert_eq!(cached, Some(n_prompt - 1), "{again}");
    std::fs::remove_dir_all(&dir).ok();
}
