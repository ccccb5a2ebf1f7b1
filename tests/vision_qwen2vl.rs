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
use common::image_chat::{answers_twice, ask, data_url, greedy_case};
use common::llava;
use common::projector::{check_qwen_budget_and_layout, compare_grid, synth_projector};
use llamafile::vision::{Projector, ProjectorType};
use serde_json::json;

fn projector(ty: &str, tag: &str) -> Option<Projector> {
    synth_projector(
        "qwen2vl",
        ty,
        tag,
        "siglip_mmproj_sha256",
        &format!("qwen2vl-{ty}"),
    )
}

fn compare(ty: &str, w: usize, h: usize, grid: (usize, usize)) {
    compare_grid("qwen2vl", ty, w, h, grid);
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
    check_qwen_budget_and_layout(&p);
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
    let case = greedy_case("qwen2vl");
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
    let body = ask(&data_url(&llava::picture_png(130, 50)), "Describe.");
    // 10 image tokens, their markers and the chat text.
    let n_prompt = answers_twice(srv.port, &body, &case["text"]);
    assert!(n_prompt > 12, "{n_prompt}");
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
