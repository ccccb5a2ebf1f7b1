//! Llama 4's projector (`llama4`) against llama.cpp: the image embeddings of the synthetic
//! projector (`tools/synth-model.py --mmproj llama4 f16|q8_0`: 112-pixel tiles, LayerNorm ViT
//! with a class token and 2-D RoPE, pixel shuffle by 2, the adapter MLP and projection) against
//! `llama-mtmd-cli`'s `MTMD_DEBUG_EMBEDDINGS` records in tests/data/vision
//! (tools/make-vision-refs.py), through the whole path (PNG decoding, the choice of tile grid,
//! bicubic fitting with black padding, the tiles and the stretched overview, normalisation, the
//! tower, the head), on a picture that is the overview alone, one cut into 2×1 tiles and one
//! into 3×2; the server's answer to an `image_url` request as llama-mtmd-cli's; refusals in one
//! line. The CLI's greedy text after these images is checked with the other families' in
//! tests/vision_llama_cpp.rs.

mod common;

use common::image_chat::first_case_as_chat;
use common::llava;
use common::picture::picture;
use common::projector::{png, records, synth_projector, tolerance, worst_relative};
use llamafile::vision::{decode, preprocess_tiles, Projector, ProjectorType};

fn projector(ty: &str, tag: &str) -> Option<Projector> {
    synth_projector(
        "llama4",
        ty,
        tag,
        "siglip_mmproj_sha256",
        &format!("llama4-{ty}"),
    )
}

/// Every encoded input of the `w`×`h` picture (the tiles of `grid`, then the overview) within
/// [`tolerance`] of llama.cpp's records, counted before encoding.
fn compare(ty: &str, w: usize, h: usize, grid: Option<(usize, usize)>) {
    let Some(proj) = projector(ty, &format!("{w}x{h}")) else {
        return;
    };
    let img = decode(&png(&picture(w, h))).unwrap();
    let tiles = preprocess_tiles(&img, proj.ty, &proj.hparams);
    assert_eq!(tiles.grid, grid, "{w}x{h}: tile grid");
    let theirs = records(&format!("llama4-{ty}-{w}x{h}.emb"));
    assert_eq!(tiles.images.len(), theirs.len(), "inputs encoded");
    let total: usize = theirs.iter().map(|r| r.0).sum();
    assert_eq!(proj.n_tokens_for(w, h), total, "counted before encoding");
    let mut worst = 0f32;
    for (i, (tile, (n_tokens, n_embd, want))) in tiles.images.iter().zip(&theirs).enumerate() {
        assert_eq!(
            (*n_tokens, *n_embd),
            (proj.n_image_tokens(), proj.n_embd_out()),
            "input {i}"
        );
        worst = worst.max(worst_relative(&proj.encode(tile), want));
    }
    eprintln!("llama4 {ty} {w}x{h}: max |ours - llama.cpp| / max |llama.cpp| = {worst:.2e}");
    assert!(worst < tolerance(ty), "llama4 {ty} {w}x{h}: {worst}");
}

// 84×84 fits one 112-pixel tile: the overview alone. 130×50: the 2×1 grid (224×112) keeps all
// its pixels and wastes the least. 250×180: 3×2 (336×224).

#[test]
fn f16_overview_alone() {
    compare("f16", 84, 84, None);
}

#[test]
fn f16_two_tiles() {
    compare("f16", 130, 50, Some((2, 1)));
}

#[test]
fn f16_six_tiles() {
    compare("f16", 250, 180, Some((3, 2)));
}

#[test]
fn q8_0_overview_alone() {
    compare("q8_0", 84, 84, None);
}

#[test]
fn q8_0_two_tiles() {
    compare("q8_0", 130, 50, Some((2, 1)));
}

#[test]
fn q8_0_six_tiles() {
    compare("q8_0", 250, 180, Some((3, 2)));
}

#[test]
fn type_tokens_and_layout() {
    let Some(p) = projector("f16", "types") else {
        return;
    };
    assert_eq!(p.ty, ProjectorType::Llama4);
    // 8×8 patches shuffled by 2: 16 tokens a tile, into the text model's 256.
    assert_eq!(
        (p.hparams.n_merge, p.n_image_tokens(), p.n_embd_out()),
        (2, 16, 256)
    );
    // At most 3×3 tiles and the overview.
    assert_eq!(p.n_tokens_for(4000, 3000), 10 * 16);
    assert_eq!(p.n_tokens_for(112, 112), 16);
    assert_eq!(p.n_tokens_for(113, 112), 3 * 16);
    let layout = p.layout();
    assert_eq!(
        (layout.begin, layout.end),
        ("<|image_start|>", "<|image_end|>")
    );
    let tiles = layout.tiles.unwrap();
    assert_eq!(tiles.tile_text(1, 2), "");
    assert!(tiles.row_end.is_empty() && tiles.overview_begin.is_empty());
    assert!(layout.causal && !layout.dynamic_size && !p.ty.mrope());
}

/// The Q8_0 projector's bytes with `clip.vision.projector.scale_factor` renamed (same length, so
/// still a well-formed file): no pixel shuffle, so the adapter's first matrix is 4× too wide for
/// its input, which the loader and the CLI name. One line, exit 1.
#[test]
fn refusals_are_one_line() {
    let Some((text, mmproj)) = llava::family_pair("llama4") else {
        return;
    };
    let key = b"clip.vision.projector.scale_factor";
    let mut bytes = std::fs::read(&mmproj).unwrap();
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap();
    bytes[at + key.len() - 1] = b'X';
    let load_error = "'mm.model.mlp.1.weight' has shape";
    llava::refused_everywhere(&text, &bytes, load_error, "mm.model.mlp.1.weight");
}

/// The first Llama 4 case of tests/data/vision/greedy.json ("What do you see?" after the 250×180
/// picture: 3×2 tiles and the overview, 112 image tokens) as an OpenAI `image_url` request:
/// llama-mtmd-cli's text, and the same again from the cached prefix.
#[test]
fn a_chat_image_url_answers_as_llama_mtmd_cli() {
    if let Some(n_prompt) = first_case_as_chat("llama4", "llama4", "What do you see?", (250, 180)) {
        assert!(n_prompt > 112, "{n_prompt}");
    }
}
