//! Qwen2-VL's projector (`qwen2vl_merger`) against llama.cpp: the image embeddings of the
//! synthetic projector (`tools/synth-model.py --mmproj qwen2vl f16|q8_0`) against
//! `llama-mtmd-cli`'s `MTMD_DEBUG_EMBEDDINGS` records in tests/data/vision
//! (tools/make-vision-refs.py), through the whole path (PNG decoding, the resize to whole 2×2
//! windows of patches, normalisation, the two patch kernels, the tower with its 2-D RoPE, the
//! merger); the token counts and grids; and a projector whose width is not the text model's
//! refused in one line; and a server's `image_url` request. The greedy text after Qwen2-VL images (M-RoPE positions in the text
//! model) is checked with the other families' in tests/vision_llama_cpp.rs.

mod common;

use common::http::post;
use common::llava;
use common::picture::picture;
use common::projector::{data_dir, png, synth_projector};
use llamafile::vision::{decode, preprocess_tiles, Projector, ProjectorType};
use serde_json::{json, Value};

fn projector(ty: &str, tag: &str) -> Option<Projector> {
    synth_projector(
        "qwen2vl",
        ty,
        tag,
        "siglip_mmproj_sha256",
        &format!("qwen2vl-{ty}"),
    )
}

/// The one record of a reference file: (n_tokens, n_embd, values).
fn record(name: &str) -> (usize, usize, Vec<f32>) {
    let bytes = std::fs::read(data_dir().join(name)).unwrap();
    let n_tokens = i32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    let n_embd = i32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    assert_eq!(
        bytes.len(),
        8 + n_tokens * n_embd * 4,
        "one record in {name}"
    );
    let values = bytes[8..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (n_tokens, n_embd, values)
}

/// Max |ours − llama.cpp| relative to llama.cpp's largest magnitude; the token grid.
fn compare(ty: &str, w: usize, h: usize, grid: (usize, usize)) {
    let Some(proj) = projector(ty, &format!("{w}x{h}")) else {
        return;
    };
    let img = decode(&png(&picture(w, h))).unwrap();
    let tiles = preprocess_tiles(&img, proj.ty, &proj.hparams);
    assert_eq!(tiles.images.len(), 1, "one input");
    let input = &tiles.images[0];
    assert_eq!(proj.token_grid(input), Some(grid), "{w}x{h}: token grid");
    let (n_tokens, n_embd, want) = record(&format!("qwen2vl-{ty}-{w}x{h}.emb"));
    assert_eq!((n_tokens, n_embd), (grid.0 * grid.1, proj.n_embd_out()));
    assert_eq!(proj.n_tokens_for(w, h), n_tokens, "counted before encoding");
    let ours = proj.encode(input);
    assert_eq!(ours.len(), want.len());
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = ours
        .iter()
        .zip(&want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    let worst = diff / scale;
    eprintln!("qwen2vl {ty} {w}x{h}: max |ours - llama.cpp| / max |llama.cpp| = {worst:.2e}");
    // As tests/vision_siglip.rs: f16 activations round apart; Q8_0 blocks may round a value
    // on a boundary either way.
    let tolerance = if ty == "f16" { 1e-3 } else { 2e-2 };
    assert!(worst < tolerance, "qwen2vl {ty} {w}x{h}: {worst}");
}

// 130×50 → 140×56 pixels: 5×2 windows of 2×2 14-pixel patches; 90×170 → 84×168: 3×6.

#[test]
fn f16_wide_picture() {
    compare("f16", 130, 50, (5, 2));
}

#[test]
fn f16_tall_picture() {
    compare("f16", 90, 170, (3, 6));
}

#[test]
fn q8_0_wide_picture() {
    compare("q8_0", 130, 50, (5, 2));
}

#[test]
fn q8_0_tall_picture() {
    compare("q8_0", 90, 170, (3, 6));
}

#[test]
fn type_and_token_budget() {
    let Some(p) = projector("f16", "types") else {
        return;
    };
    assert_eq!(p.ty, ProjectorType::Qwen2vl);
    assert_eq!((p.hparams.n_merge, p.n_embd_out()), (2, 256));
    // At least 8 tokens, at most 4096 (clip's limits for Qwen2-VL).
    assert!(p.n_tokens_for(10, 10) >= 8);
    assert!(p.n_tokens_for(8000, 8000) <= 4096);
    assert_eq!(p.layout().begin, "<|vision_start|>");
    assert_eq!(p.layout().end, "<|vision_end|>");
}

/// A projector for another width, or for a text model without M-RoPE: one line, exit 1.
#[test]
fn a_projector_not_for_the_model_is_one_line() {
    let Some((_, mmproj)) = llava::family_pair("qwen2vl") else {
        return;
    };
    let Some((llava_text, _)) = llava::pair() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("llamafile-qwen2vl-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pic = dir.join("pic.png");
    std::fs::write(&pic, llava::picture_png(130, 50)).unwrap();
    let (mm, pic) = (mmproj.to_str().unwrap(), pic.to_str().unwrap());
    let mut cases = vec![(
        llava_text.to_str().unwrap().to_string(),
        "architecture 'llama' does not read",
    )];
    if let Some(smol) = common::model_path("SmolLM2-135M-Instruct.Q4_1") {
        cases.push((smol.to_str().unwrap().to_string(), "not for this model"));
    }
    for (text, needle) in cases {
        let args = ["-m", &text, "--mmproj", mm, "--image", pic, "-p", "hi"];
        let out = common::llamafile(&args);
        common::assert_one_line_error(&out, needle);
        assert_eq!(out.status.code(), Some(1), "{text}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The first Qwen2-VL case of tests/data/vision/greedy.json ("Describe." after the 130×50
/// picture) as an OpenAI `image_url` request: llama-mtmd-cli's text; the same request again
/// reuses the cached prefix (the image's positions included) and answers the same; a slot
/// holding the image is not saved (its M-RoPE positions are not in the slot file), with a 400.
#[test]
fn a_chat_image_url_answers_as_llama_mtmd_cli() {
    let Some((text, mmproj)) = llava::family_pair("qwen2vl") else {
        return;
    };
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(data_dir().join("greedy.json")).unwrap())
            .unwrap();
    let case = doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["family"] == "qwen2vl")
        .unwrap()
        .clone();
    assert_eq!(
        (&case["prompt"], &case["pictures"]),
        (&json!("Describe."), &json!(["130x50"]))
    );
    let dir = std::env::temp_dir().join(format!("llamafile-qwen2vl-slots-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mm = mmproj.to_str().unwrap();
    let args = [
        "--mmproj",
        mm,
        "--chat-template",
        "chatml",
        "-np",
        "1",
        "--slot-save-path",
        dir.to_str().unwrap(),
    ];
    let srv = common::server::start_with(&text, &args);
    let png = llava::picture_png(130, 50);
    let url = format!("data:image/png;base64,{}", base64(&png));
    let body = json!({
        "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": "Describe."},
        ]}],
        "max_tokens": 12,
        "temperature": 0,
    });
    let first = post(srv.port, "/v1/chat/completions", &body);
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let first = first.json();
    assert_eq!(first["choices"][0]["message"]["content"], case["text"]);
    let n_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    // 10 image tokens, their markers and the chat text.
    assert!(n_prompt > 12, "{first}");
    let again = post(srv.port, "/v1/chat/completions", &body).json();
    assert_eq!(again["choices"][0]["message"]["content"], case["text"]);
    let cached = again["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    assert_eq!(cached, Some(n_prompt - 1), "{again}");
    let saved = post(
        srv.port,
        "/slots/0?action=save",
        &json!({"filename": "q.bin"}),
    );
    assert_eq!(
        saved.status,
        400,
        "{}",
        String::from_utf8_lossy(&saved.body)
    );
    let msg = saved.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("M-RoPE"), "{msg}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
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
