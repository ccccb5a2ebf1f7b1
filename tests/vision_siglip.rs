//! The SigLIP projectors' image embeddings against llama.cpp's (`llama-mtmd-cli`'s
//! `MTMD_DEBUG_EMBEDDINGS` records in tests/data/vision, made by tools/make-vision-refs.py):
//! Gemma 3 (`gemma3`: pooling, soft-embedding norm, input projection) and SmolVLM (`idefics3`:
//! tiles and an overview, pixel shuffle), f16 and Q8_0 weights, through the whole path (PNG
//! decoding, Pillow-style resampling, padding or tiling, normalisation, the tower, the head).

mod common;

use common::picture::picture;
use common::projector::{data_dir, png, synth_projector};
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

/// The records of a reference file: (n_tokens, n_embd, values) per encoded input.
fn records(name: &str) -> Vec<(usize, usize, Vec<f32>)> {
    let bytes = std::fs::read(data_dir().join(name)).unwrap();
    let mut out = Vec::new();
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let n_tokens = i32::from_le_bytes(rest[0..4].try_into().unwrap()) as usize;
        let n_embd = i32::from_le_bytes(rest[4..8].try_into().unwrap()) as usize;
        let len = 8 + n_tokens * n_embd * 4;
        let values = rest[8..len]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        out.push((n_tokens, n_embd, values));
        rest = &rest[len..];
    }
    out
}

/// Max |ours − llama.cpp| relative to llama.cpp's largest magnitude, over every value of
/// every encoded input; also checks the inputs' count, order (by the tile grid) and shapes.
fn compare(family: &str, ty: &str, w: usize, h: usize, want_grid: Option<(usize, usize)>) {
    let Some(proj) = projector(family, ty, &format!("{w}x{h}")) else {
        return;
    };
    let img = decode(&png(&picture(w, h))).unwrap();
    let tiles = preprocess_tiles(&img, proj.ty, &proj.hparams);
    assert_eq!(tiles.grid, want_grid, "{family} {w}x{h}: tile grid");
    let theirs = records(&format!("{family}-{ty}-{w}x{h}.emb"));
    assert_eq!(tiles.images.len(), theirs.len(), "inputs encoded");
    let mut worst = 0f32;
    for (i, (tile, (n_tokens, n_embd, want))) in tiles.images.iter().zip(&theirs).enumerate() {
        assert_eq!(
            (*n_tokens, *n_embd),
            (proj.n_image_tokens(), proj.n_embd_out()),
            "input {i}"
        );
        let ours = proj.encode(tile);
        assert_eq!(ours.len(), want.len());
        let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let diff = ours
            .iter()
            .zip(want)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        worst = worst.max(diff / scale);
    }
    eprintln!("{family} {ty} {w}x{h}: max |ours - llama.cpp| / max |llama.cpp| = {worst:.2e}");
    let tolerance = if ty == "f16" { 1e-3 } else { 2e-2 };
    assert!(worst < tolerance, "{family} {ty} {w}x{h}: {worst}");
}

// Tolerances as tests/vision_llama_cpp.rs explains them: f16 weights round activations to f16
// on both sides and sum in different orders; Q8_0 activation blocks can round a value on a
// boundary either way.

#[test]
fn gemma3_f16_padded_picture() {
    compare("gemma3", "f16", 130, 50, None);
}

#[test]
fn gemma3_f16_input_sized_picture() {
    compare("gemma3", "f16", 224, 224, None);
}

#[test]
fn gemma3_q8_0_padded_picture() {
    compare("gemma3", "q8_0", 130, 50, None);
}

#[test]
fn gemma3_q8_0_input_sized_picture() {
    compare("gemma3", "q8_0", 224, 224, None);
}

#[test]
fn smolvlm_f16_wide_picture() {
    compare("smolvlm", "f16", 130, 50, Some((2, 1)));
}

#[test]
fn smolvlm_f16_tall_picture() {
    compare("smolvlm", "f16", 90, 170, Some((2, 2)));
}

#[test]
fn smolvlm_q8_0_wide_picture() {
    compare("smolvlm", "q8_0", 130, 50, Some((2, 1)));
}

#[test]
fn smolvlm_q8_0_tall_picture() {
    compare("smolvlm", "q8_0", 90, 170, Some((2, 2)));
}

#[test]
fn types_and_token_counts() {
    let Some(g) = projector("gemma3", "f16", "types") else {
        return;
    };
    assert_eq!(g.ty, ProjectorType::Gemma3);
    // 224 / 14 = 16 patches per side, pooled by the default 4.
    assert_eq!(
        (g.hparams.n_merge, g.n_image_tokens(), g.n_embd_out()),
        (4, 16, 256)
    );
    let Some(s) = projector("smolvlm", "f16", "types") else {
        return;
    };
    assert_eq!(s.ty, ProjectorType::Idefics3);
    assert_eq!((s.hparams.n_merge, s.n_image_tokens()), (2, 16));
    assert_eq!(s.hparams.longest_edge, Some(256));
    // Tiles and the overview, counted before any pixel is touched.
    assert_eq!(s.n_tokens_for(130, 50), 3 * 16);
    assert_eq!(s.n_tokens_for(90, 170), 5 * 16);
    assert_eq!(g.n_tokens_for(4000, 10), 16);
}
