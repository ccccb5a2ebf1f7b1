//! Our image embeddings against llama.cpp's (`llama-mtmd-cli`'s `MTMD_DEBUG_EMBEDDINGS` dumps in
//! tests/data/vision): the synthetic LLaVA projector with f16 and Q8_0 weights, on a picture that
//! is resized and padded and on one of the input size, through the whole path (PNG decoding,
//! Pillow-style resampling, normalisation, the ViT and the MLP).

mod common;

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
