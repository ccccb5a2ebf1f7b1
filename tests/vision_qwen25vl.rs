//! Qwen2.5-VL's projector (`qwen2.5vl_merger`) against llama.cpp: the image embeddings of the
//! synthetic projector (`tools/synth-model.py --mmproj qwen25vl f16|q8_0`: RMS norms, a gated
//! SiLU FFN, blocks 1 and 3 over the whole image and 0 and 2 within 112-pixel windows) against
//! `llama-mtmd-cli`'s `MTMD_DEBUG_EMBEDDINGS` records in tests/data/vision
//! (tools/make-vision-refs.py), on a picture of one window row and one of 3×2 windows, those
//! at the edges cut short; the server's answer to an `image_url` request as llama-mtmd-cli's;
//! refusals in one line. The CLI's greedy text after these images is checked with the other
//! families' in tests/vision_llama_cpp.rs.

mod common;

use std::sync::Arc;

use common::image_chat::first_case_as_chat;
use common::llava;
use common::projector::{check_qwen_budget_and_layout, compare_grid, synth_projector};
use llamafile::gguf::GgufFile;
use llamafile::vision::{Projector, ProjectorType};

fn projector(ty: &str, tag: &str) -> Option<Projector> {
    let name = format!("qwen25vl-{ty}");
    synth_projector("qwen25vl", ty, tag, "siglip_mmproj_sha256", &name)
}

fn compare(ty: &str, w: usize, h: usize, grid: (usize, usize)) {
    compare_grid("qwen25vl", ty, w, h, grid);
}

// 130×50 → 140×56 pixels: 5×2 tokens, windows of 4×2 and 1×2; 250×180 → 252×168: 9×6 tokens,
// windows of 4×4, 4×4, 1×4, 4×2, 4×2, 1×2.

#[test]
fn f16_one_row_of_windows() {
    compare("f16", 130, 50, (5, 2));
}

#[test]
fn f16_two_rows_of_windows() {
    compare("f16", 250, 180, (9, 6));
}

#[test]
fn q8_0_one_row_of_windows() {
    compare("q8_0", 130, 50, (5, 2));
}

#[test]
fn q8_0_two_rows_of_windows() {
    compare("q8_0", 250, 180, (9, 6));
}

#[test]
fn type_budget_and_layout() {
    let Some(p) = projector("f16", "types") else {
        return;
    };
    assert_eq!(p.ty, ProjectorType::Qwen25vl);
    check_qwen_budget_and_layout(&p);
}

/// The Q8_0 projector's bytes with `clip.vision.n_wa_pattern` renamed (same length, so still a
/// well-formed file): the loader and the CLI name the missing key; a text model without M-RoPE
/// is refused as for Qwen2-VL. One line each, exit 1.
#[test]
fn refusals_are_one_line() {
    let Some((_, mmproj)) = llava::family_pair("qwen25vl") else {
        return;
    };
    let Some((llava_text, _)) = llava::pair() else {
        return;
    };
    let key = b"clip.vision.n_wa_pattern";
    let mut bytes = std::fs::read(&mmproj).unwrap();
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap();
    bytes[at + key.len() - 1] = b'X';
    let err = Projector::load(Arc::new(GgufFile::from_bytes(bytes.clone()).unwrap()))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("'clip.vision.n_wa_pattern' is missing"),
        "{err}"
    );
    let dir = std::env::temp_dir().join(format!("llamafile-qwen25vl-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (bad, pic) = (dir.join("bad.gguf"), dir.join("pic.png"));
    std::fs::write(&bad, &bytes).unwrap();
    std::fs::write(&pic, llava::picture_png(130, 50)).unwrap();
    let pic = pic.to_str().unwrap();
    let cases = [
        (&llava_text, &bad, "n_wa_pattern"),
        (&llava_text, &mmproj, "architecture 'llama' does not read"),
    ];
    for (text, mm, needle) in cases {
        let (text, mm) = (text.to_str().unwrap(), mm.to_str().unwrap());
        let args = ["-m", text, "--mmproj", mm, "--image", pic, "-p", "hi"];
        let out = common::llamafile(&args);
        common::assert_one_line_error(&out, needle);
        assert_eq!(out.status.code(), Some(1), "{needle}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The first Qwen2.5-VL case of tests/data/vision/greedy.json ("What is it?" after the 250×180
/// picture, 54 image tokens in 6 windows) as an OpenAI `image_url` request: llama-mtmd-cli's
/// text, and the same again from the cached prefix.
#[test]
fn a_chat_image_url_answers_as_llama_mtmd_cli() {
    if let Some(n_prompt) = first_case_as_chat("qwen25vl", "chatml", "What is it?", (250, 180)) {
        assert!(n_prompt > 54, "{n_prompt}");
    }
}
