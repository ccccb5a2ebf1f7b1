//! The Pixtral projectors' image embeddings against llama.cpp's (`llama-mtmd-cli`'s
//! `MTMD_DEBUG_EMBEDDINGS` records in tests/data/vision, made by tools/make-vision-refs.py):
//! Pixtral-12B's form (`pixtral`: no merger, projector biases) and Mistral Small 3.1's
//! (`mistral3`: the 2×2 patch merger), f16 and Q8_0 weights, on a wide and a tall picture,
//! through the whole path (PNG decoding, the size kept in whole patches, bicubic resampling
//! with black padding, normalisation, the tower with its 2-D RoPE, the head, the `[IMG_BREAK]`
//! rows). The greedy text after these images is checked by tests/vision_llama_cpp.rs; here the
//! server's answer to a chat request with the image, and the CLI's refusals.

mod common;

use common::image_chat::{answers_twice, ask, data_url, greedy_case};
use common::picture::picture;
use common::projector::{png, record, synth_projector, tolerance, worst_relative};
use llamafile::vision::{decode, preprocess_tiles, Projector, ProjectorType};

/// The synthetic projector of `family` and `ty` the references were made from.
fn projector(family: &str, ty: &str, tag: &str) -> Option<Projector> {
    synth_projector(
        family,
        ty,
        tag,
        "siglip_mmproj_sha256",
        &format!("{family}-{ty}"),
    )
}

/// Max |ours − llama.cpp| relative to llama.cpp's largest magnitude; also checks the size the
/// picture is resized to and the row count (image tokens and breaks).
fn compare(family: &str, ty: &str, w: usize, h: usize, want_size: (usize, usize)) {
    let Some(proj) = projector(family, ty, &format!("{w}x{h}")) else {
        return;
    };
    let img = decode(&png(&picture(w, h))).unwrap();
    let tiles = preprocess_tiles(&img, proj.ty, &proj.hparams);
    assert_eq!((tiles.grid, tiles.images.len()), (None, 1));
    let input = &tiles.images[0];
    assert_eq!((input.width, input.height), want_size, "{family} {w}x{h}");
    let (n_tokens, n_embd, want) = record(&format!("{family}-{ty}-{w}x{h}.emb"));
    assert_eq!(
        (n_tokens, n_embd),
        (proj.n_tokens_for(w, h), proj.n_embd_out())
    );
    let worst = worst_relative(&proj.encode(input), &want);
    eprintln!("{family} {ty} {w}x{h}: max |ours - llama.cpp| / max |llama.cpp| = {worst:.2e}");
    assert!(worst < tolerance(ty), "{family} {ty} {w}x{h}: {worst}");
}

// Tolerances as tests/vision_llama_cpp.rs explains them: f16 weights round activations to f16
// on both sides and sum in different orders; Q8_0 activation blocks can round a value on a
// boundary either way.

#[test]
fn pixtral_f16_wide_picture() {
    compare("pixtral", "f16", 130, 50, (128, 48));
}

#[test]
fn pixtral_f16_tall_picture() {
    compare("pixtral", "f16", 90, 170, (96, 176));
}

#[test]
fn pixtral_q8_0_wide_picture() {
    compare("pixtral", "q8_0", 130, 50, (128, 48));
}

#[test]
fn pixtral_q8_0_tall_picture() {
    compare("pixtral", "q8_0", 90, 170, (96, 176));
}

#[test]
fn mistral3_f16_wide_picture() {
    compare("mistral3", "f16", 130, 50, (128, 64));
}

#[test]
fn mistral3_f16_tall_picture() {
    compare("mistral3", "f16", 90, 170, (96, 160));
}

#[test]
fn mistral3_q8_0_wide_picture() {
    compare("mistral3", "q8_0", 130, 50, (128, 64));
}

#[test]
fn mistral3_q8_0_tall_picture() {
    compare("mistral3", "q8_0", 90, 170, (96, 160));
}

#[test]
fn types_and_token_counts() {
    let Some(p) = projector("pixtral", "f16", "types") else {
        return;
    };
    assert_eq!(p.ty, ProjectorType::Pixtral);
    assert_eq!((p.hparams.n_merge, p.n_embd_out()), (1, 256));
    // 128×48: 8×3 patches and 2 breaks.
    assert_eq!(p.n_tokens_for(130, 50), 8 * 3 + 2);
    // At most 1024 tokens before the breaks: 4000×3000 becomes 576×432, 36×27 patches.
    assert_eq!(p.n_tokens_for(4000, 3000), 36 * 27 + 26);
    // At least 8: 10×10 becomes 48×48.
    assert_eq!(p.n_tokens_for(10, 10), 3 * 3 + 2);
    let layout = p.layout();
    assert_eq!((layout.begin, layout.end), ("", "[IMG_END]"));
    assert!(layout.causal && layout.tiles.is_none());
    let Some(m) = projector("mistral3", "q8_0", "types") else {
        return;
    };
    assert_eq!(m.ty, ProjectorType::Pixtral);
    // 96×160 in 32-pixel windows: 3×5 tokens and 4 breaks.
    assert_eq!((m.hparams.n_merge, m.n_tokens_for(90, 170)), (2, 19));
}

#[test]
fn cli_refusals_are_one_line() {
    let Some((text, mmproj)) = common::llava::family_pair("pixtral") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("llamafile-pixtral-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pic = dir.join("pic.png");
    std::fs::write(&pic, common::llava::picture_png(130, 50)).unwrap();
    let (text, mmproj, pic) = (
        text.to_str().unwrap(),
        mmproj.to_str().unwrap(),
        pic.to_str().unwrap(),
    );
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--mmproj",
            mmproj,
            "--image",
            pic,
            "-p",
            "Describe.",
            "-n",
            "1",
        ];
        args.extend_from_slice(extra);
        common::llamafile(&args)
    };
    // llama.cpp would move the 8..1024 token budget; not built.
    let out = run(&["-m", text, "--image-max-tokens", "64"]);
    common::assert_one_line_error(&out, "--image-max-tokens");
    // 26 rows and the text do not fit in 20 positions.
    let out = run(&["-m", text, "-c", "20"]);
    common::assert_one_line_error(&out, "26 of them for 1 images");
    // A text model of another width (SmolLM2's 576).
    if let Some(smollm) = common::model_path("SmolLM2-135M-Instruct.Q4_1") {
        let out = run(&["-m", smollm.to_str().unwrap()]);
        common::assert_one_line_error(&out, "not for this model");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The first `pixtral` case of tests/data/vision/greedy.json ("Describe." after the 130×50
/// picture) as an OpenAI chat request with an `image_url` part: llama-mtmd-cli's text, the
/// image's 26 rows (and `[IMG_END]`) counted, and the same request again reusing the prefix.
#[test]
fn server_chat_answers_as_llama_mtmd_cli() {
    let Some((text, mmproj)) = common::llava::family_pair("pixtral") else {
        return;
    };
    let case = greedy_case("pixtral");
    assert_eq!(
        (&case["prompt"], &case["pictures"]),
        (
            &serde_json::json!("Describe."),
            &serde_json::json!(["130x50"])
        )
    );
    let mm = mmproj.to_str().unwrap();
    let srv = common::server::start_with(
        &text,
        &["--mmproj", mm, "--chat-template", "mistral-v7", "-np", "1"],
    );
    let body = ask(&data_url(&common::llava::picture_png(130, 50)), "Describe.");
    let n_prompt = answers_twice(srv.port, &body, &case["text"]);
    assert!(n_prompt > 27, "{n_prompt}");
}
