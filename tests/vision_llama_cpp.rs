//! Our image embeddings against llama.cpp's (`llama-mtmd-cli`'s `MTMD_DEBUG_EMBEDDINGS` dumps in
//! tests/data/vision): the synthetic LLaVA projector with f16 and Q8_0 weights, on a picture that
//! is resized and padded and on one of the input size, through the whole path (PNG decoding,
//! Pillow-style resampling, normalisation, the ViT and the MLP). And our CLI's greedy text after
//! images against llama-mtmd-cli's (tests/data/vision/greedy.json, tools/make-vision-refs.py) on
//! the synthetic Gemma 3 pair (`<start_of_image>` rows `<end_of_image>`, the rows read
//! bidirectionally: read causally, the first case differs from its first token) and SmolVLM pair
//! (tiles with their row and column tokens, then the overview).

mod common;

use common::llava;
use common::picture::picture;
use common::projector::{data_dir, png, synth_projector};
use llamafile::vision::{decode, preprocess, Projector};

/// The synthetic LLaVA projector of `ty` the references were made from.
fn projector(ty: &str, tag: &str) -> Option<Projector> {
    synth_projector("llava", ty, tag, "mmproj_sha256", ty)
}

fn reference(name: &str) -> (usize, usize, Vec<f32>) {
    let bytes = std::fs::read(data_dir().join(name)).unwrap();
    let n_tokens = i32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    let n_embd = i32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    let values = bytes[8..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (n_tokens, n_embd, values)
}

/// Max |ours − llama.cpp| relative to llama.cpp's largest magnitude, over every value.
fn compare(ty: &str, w: usize, h: usize, pic: &str, tolerance: f32) {
    let Some(proj) = projector(ty, &format!("{ty}-{pic}")) else {
        return;
    };
    let img = decode(&png(&picture(w, h))).unwrap();
    let ours = proj.encode(&preprocess(&img, proj.ty, &proj.hparams));
    let (n_tokens, n_embd, theirs) = reference(&format!("llava-{ty}-{pic}.emb"));
    assert_eq!(
        (n_tokens, n_embd),
        (proj.n_image_tokens(), proj.n_embd_out())
    );
    assert_eq!(ours.len(), theirs.len());
    let scale = theirs.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = ours
        .iter()
        .zip(&theirs)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    eprintln!(
        "{ty} {pic}: max |ours - llama.cpp| / max |llama.cpp| = {:.2e}",
        diff / scale
    );
    assert!(diff / scale < tolerance, "{ty} {pic}: {}", diff / scale);
}

// Tolerances: f16 weights take f16 activations, ggml's and ours alike, and the two sum in
// different orders (measured 3.9e-4 and 4.0e-4). With Q8_0 weights the activations are Q8_0
// blocks: usually both round the same way (the 84×84 picture matches to the bit), but a value on
// a rounding boundary can go either way and move its block by 1/127 (measured 7.9e-3 on the
// resized picture, whose resampling matches Pillow's to the byte).

#[test]
fn f16_resized_picture() {
    compare("f16", 130, 50, "130x50", 1e-3);
}

#[test]
fn f16_input_sized_picture() {
    compare("f16", 84, 84, "84", 1e-3);
}

#[test]
fn q8_0_resized_picture() {
    compare("q8_0", 130, 50, "130x50", 2e-2);
}

#[test]
fn q8_0_input_sized_picture() {
    compare("q8_0", 84, 84, "84", 2e-2);
}

#[test]
fn greedy_text_after_gemma3_and_smolvlm_images_matches_llama_mtmd_cli() {
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data_dir().join("greedy.json")).unwrap())
            .unwrap();
    let dir = std::env::temp_dir().join(format!("llamafile-vision-greedy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for case in doc["cases"].as_array().unwrap() {
        let family = case["family"].as_str().unwrap();
        let Some((text, mmproj)) = llava::family_pair(family) else {
            return;
        };
        let prompt = case["prompt"].as_str().unwrap();
        let mut args: Vec<String> = ["-m", text.to_str().unwrap()]
            .into_iter()
            .chain(["--mmproj", mmproj.to_str().unwrap(), "-p", prompt])
            .chain(["-n", "12", "--temp", "0", "-t", "2", "--chat-template"])
            .chain([case["template"].as_str().unwrap()])
            .map(String::from)
            .collect();
        for pic in case["pictures"].as_array().unwrap() {
            let pic = pic.as_str().unwrap();
            let (w, h) = pic.split_once('x').unwrap();
            let path = dir.join(format!("{pic}.png"));
            let png = llava::picture_png(w.parse().unwrap(), h.parse().unwrap());
            std::fs::write(&path, png).unwrap();
            args.extend(["--image".into(), path.to_str().unwrap().into()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = common::llamafile(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{family} {prompt:?}: {stderr}");
        let got = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            got.trim_matches('\n'),
            case["text"].as_str().unwrap(),
            "{family} {prompt:?} {}",
            case["pictures"]
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
