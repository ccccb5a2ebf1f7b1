//! Chat requests with images for the vision server tests: a picture as a base64 `data:` URL,
//! an OpenAI request with one `image_url` part and a text part, llama-mtmd-cli's greedy cases
//! (tests/data/vision/greedy.json), and the check that a request answers as llama-mtmd-cli and
//! again from the cached prefix.

use serde_json::{json, Value};

/// Standard base64 with padding.
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = (c.iter().enumerate()).fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for k in 0..4 {
            match k <= c.len() {
                true => out.push(A[(n >> (18 - 6 * k) & 63) as usize] as char),
                false => out.push('='),
            }
        }
    }
    out
}

/// `png` as a `data:image/png;base64,` URL.
pub fn data_url(png: &[u8]) -> String {
    format!("data:image/png;base64,{}", base64(png))
}

/// An OpenAI chat request: the image at `url`, then `text`; 12 greedy tokens.
pub fn ask(url: &str, text: &str) -> Value {
    json!({
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": text},
        ]}],
        "max_tokens": 12,
        "temperature": 0,
    })
}

/// The first case of `family` in tests/data/vision/greedy.json, which must be `prompt` after
/// the one `w`×`h` picture, asked of a server with the family's synthetic pair (one slot, chat
/// template `template`) as an OpenAI `image_url` request, twice ([`answers_twice`]): returns
/// the prompt's token count, or `None` (skip) where the pair cannot be made.
pub fn first_case_as_chat(
    family: &str,
    template: &str,
    prompt: &str,
    (w, h): (usize, usize),
) -> Option<u64> {
    let (text, mmproj) = super::llava::family_pair(family)?;
    let case = greedy_case(family);
    assert_eq!(
        (&case["prompt"], &case["pictures"]),
        (
            &serde_json::json!(prompt),
            &serde_json::json!([format!("{w}x{h}")])
        )
    );
    let mm = mmproj.to_str().unwrap();
    let args = ["--mmproj", mm, "--chat-template", template, "-np", "1"];
    let srv = super::server::start_with(&text, &args);
    let body = ask(&data_url(&super::llava::picture_png(w, h)), prompt);
    Some(answers_twice(srv.port, &body, &case["text"]))
}

/// The first case of `family` in tests/data/vision/greedy.json.
pub fn greedy_case(family: &str) -> Value {
    let path = super::projector::data_dir().join("greedy.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["family"] == family)
        .unwrap_or_else(|| panic!("greedy.json has no {family} case"))
        .clone()
}

/// Posts `body` to the server on `port` twice: both answers must be `want`, the second reusing
/// all of the first's prompt but its last token. Returns the prompt's token count.
pub fn answers_twice(port: u16, body: &Value, want: &Value) -> u64 {
    let first = super::http::post(port, "/v1/chat/completions", body);
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let first = first.json();
    assert_eq!(&first["choices"][0]["message"]["content"], want);
    let n_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    let again = super::http::post(port, "/v1/chat/completions", body).json();
    assert_eq!(&again["choices"][0]["message"]["content"], want);
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    assert_eq!(cached, Some(n_prompt - 1), "{again}");
    n_prompt
}
