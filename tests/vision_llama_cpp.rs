//! Our image embeddings against llama.cpp's (`llama-mtmd-cli`'s `MTMD_DEBUG_EMBEDDINGS` dumps in
//! tests/data/vision): the synthetic LLaVA projector with f16 and Q8_0 weights, on a picture that
//! is resized and padded and on one of the input size, through the whole path (PNG decoding,
//! Pillow-style resampling, normalisation, the ViT and the MLP).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::picture::picture;
use llamafile::gguf::GgufFile;
use llamafile::vision::{decode, preprocess, Projector, RgbImage};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vision")
}

/// The synthetic projector of `ty`, written by tools/synth-model.py and checked against the
/// SHA-256 the references were made with; `None` (skip) without python, unless required.
fn projector(ty: &str, tag: &str) -> Option<Projector> {
    let dir =
        std::env::temp_dir().join(format!("llamafile-vision-ref-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("mmproj-{ty}.gguf"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/synth-model.py");
    let out = Command::new("python3")
        .arg(script)
        .args(["--mmproj", "llava", ty])
        .arg(&path)
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        other => {
            let why = format!(
                "tools/synth-model.py --mmproj failed (pip install gguf numpy?): {other:?}"
            );
            if std::env::var("LLAMAFILE_REQUIRE_MODELS").as_deref() == Ok("1") {
                panic!("{why}");
            }
            eprintln!("skipping: {why}");
            return None;
        }
    }
    let sha = Command::new("sha256sum").arg(&path).output().unwrap();
    let sha = String::from_utf8_lossy(&sha.stdout);
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data_dir().join("index.json")).unwrap())
            .unwrap();
    assert_eq!(
        sha.split_whitespace().next(),
        index["mmproj_sha256"][ty].as_str(),
        "the synthetic projector differs from the one the references were made from"
    );
    let proj = Projector::load(Arc::new(GgufFile::open(&path).unwrap())).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    Some(proj)
}

/// The picture as a PNG file's bytes.
fn png(img: &RgbImage) -> Vec<u8> {
    use image::ImageEncoder;
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(
            &img.data,
            img.width as u32,
            img.height as u32,
            image::ExtendedColorType::Rgb8,
        )
        .unwrap();
    out
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
