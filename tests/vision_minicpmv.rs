//! MiniCPM-V's projector (`resampler`) against llama.cpp: the image embeddings of the synthetic
//! projector (`tools/synth-model.py --mmproj minicpmv f16|q8_0`: 112-pixel inputs, SigLIP with
//! the bucketed 70×70 position table, a resampler of 16 queries in two heads) against
//! `llama-mtmd-cli`'s `MTMD_DEBUG_EMBEDDINGS` records in tests/data/vision
//! (tools/make-vision-refs.py), through the whole path (PNG decoding, LLaVA-UHD's choice of
//! overview size and slice grid, bicubic stretching and fitting with black padding, slices of
//! their own sizes, normalisation, the tower, the resampler), on a picture that is the overview
//! alone, one cut into 2×1 slices and one into 2×2 (and, for the version-2 projector of
//! MiniCPM-V 2.5's layout, the 2×2 one); the server's answer to an `image_url`
//! request as llama-mtmd-cli's; refusals in one line. The CLI's greedy text after these images
//! is checked with the other families' in tests/vision_llama_cpp.rs.

mod common;

use common::image_chat::first_case_as_chat;
use common::llava;
use common::picture::picture;
use common::projector::{png, records, synth_projector, tolerance, worst_relative};
use llamafile::vision::{decode, preprocess_tiles, Projector, ProjectorType};

/// `family`: `minicpmv` (version 3, MiniCPM-V 2.6's layout) or `minicpmv25` (version 2).
fn projector(family: &str, ty: &str, tag: &str) -> Option<Projector> {
    synth_projector(
        family,
        ty,
        tag,
        "siglip_mmproj_sha256",
        &format!("{family}-{ty}"),
    )
}

/// Every encoded input of the `w`×`h` picture (the overview of `overview` pixels, then the
/// slices of `grid`) within [`tolerance`] of llama.cpp's records, counted before encoding.
fn compare(ty: &str, w: usize, h: usize, overview: (usize, usize), grid: Option<(usize, usize)>) {
    compare_family("minicpmv", ty, w, h, overview, grid)
}

fn compare_family(
    family: &str,
    ty: &str,
    w: usize,
    h: usize,
    overview: (usize, usize),
    grid: Option<(usize, usize)>,
) {
    let Some(proj) = projector(family, ty, &format!("{w}x{h}")) else {
        return;
    };
    let img = decode(&png(&picture(w, h))).unwrap();
    let tiles = preprocess_tiles(&img, proj.ty, &proj.hparams);
    assert_eq!(tiles.grid, grid, "{w}x{h}: slice grid");
    let first = &tiles.images[0];
    assert_eq!((first.width, first.height), overview, "the overview first");
    let theirs = records(&format!("{family}-{ty}-{w}x{h}.emb"));
    assert_eq!(tiles.images.len(), theirs.len(), "inputs encoded");
    let total: usize = theirs.iter().map(|r| r.0).sum();
    assert_eq!(proj.n_tokens_for(w, h), total, "counted before encoding");
    let mut worst = 0f32;
    for (i, (input, (n_tokens, n_embd, want))) in tiles.images.iter().zip(&theirs).enumerate() {
        assert_eq!(
            (*n_tokens, *n_embd),
            (proj.n_image_tokens(), proj.n_embd_out()),
            "input {i}"
        );
        worst = worst.max(worst_relative(&proj.encode(input), want));
    }
    eprintln!("{family} {ty} {w}x{h}: max |ours - llama.cpp| / max |llama.cpp| = {worst:.2e}");
    assert!(worst < tolerance(ty), "{family} {ty} {w}x{h}: {worst}");
}

// 84×84 fits one 112-pixel input: stretched to 112×112, alone. 130×50: the overview in whole
// patches at its own size (126×56), the 2×1 grid of 126×98 slices. 250×180: the overview shrunk
// to about one input (126×98), 2×2 slices.

#[test]
fn f16_overview_alone() {
    compare("f16", 84, 84, (112, 112), None);
}

#[test]
fn f16_two_slices() {
    compare("f16", 130, 50, (126, 56), Some((2, 1)));
}

#[test]
fn f16_four_slices() {
    compare("f16", 250, 180, (126, 98), Some((2, 2)));
}

#[test]
fn q8_0_overview_alone() {
    compare("q8_0", 84, 84, (112, 112), None);
}

#[test]
fn q8_0_two_slices() {
    compare("q8_0", 130, 50, (126, 56), Some((2, 1)));
}

#[test]
fn q8_0_four_slices() {
    compare("q8_0", 250, 180, (126, 98), Some((2, 2)));
}

#[test]
fn version_2_f16_four_slices() {
    compare_family("minicpmv25", "f16", 250, 180, (126, 98), Some((2, 2)));
}

#[test]
fn version_2_q8_0_four_slices() {
    compare_family("minicpmv25", "q8_0", 250, 180, (126, 98), Some((2, 2)));
}

/// MiniCPM-V 2.5's layout: all the slices inside one `<slice>` … `</slice>`, each between
/// `<image>` and `</image>` (its greedy text after images is checked in vision_llama_cpp.rs).
#[test]
fn version_2_layout() {
    let Some(p) = projector("minicpmv25", "f16", "layout") else {
        return;
    };
    let t = p.layout().tiles.unwrap();
    assert!(t.overview_first);
    assert_eq!(
        (t.tiles_begin, t.tiles_end),
        (&["<slice>"][..], &["</slice>"][..])
    );
    assert_eq!(
        (t.tile_open, t.tile_close),
        (&["<image>"][..], &["</image>"][..])
    );
    assert_eq!(
        (t.overview_begin, t.row_end),
        (&["<image>"][..], &["\n"][..])
    );
}

#[test]
fn type_tokens_and_layout() {
    let Some(p) = projector("minicpmv", "f16", "types") else {
        return;
    };
    assert_eq!(p.ty, ProjectorType::Minicpmv);
    // 16 queries a slice, into the text model's 256.
    assert_eq!((p.n_image_tokens(), p.n_embd_out()), (16, 256));
    // At most 9 slices and the overview.
    assert_eq!(p.n_tokens_for(4000, 3000), 10 * 16);
    assert_eq!(p.n_tokens_for(112, 112), 16);
    assert_eq!(p.n_tokens_for(113, 112), 3 * 16);
    let layout = p.layout();
    assert_eq!((layout.begin, layout.end), ("", ""));
    let t = layout.tiles.unwrap();
    assert!(t.overview_first);
    assert_eq!(
        (t.overview_begin, t.overview_end),
        (&["<image>"][..], &["</image>"][..])
    );
    assert_eq!(
        (t.tile_open, t.tile_close),
        (&["<slice>"][..], &["</slice>"][..])
    );
    assert_eq!(t.row_end, &["\n"][..]);
    assert!(t.tiles_begin.is_empty() && t.tiles_end.is_empty());
    assert!(layout.causal && !layout.dynamic_size && !p.ty.mrope());
}

/// The Q8_0 projector's bytes with `clip.minicpmv_version` set to 1 (MiniCPM-V 2, which
/// llama.cpp's mtmd does not build either): the loader and the CLI name the key. One line,
/// exit 1.
#[test]
fn refusals_are_one_line() {
    let Some((text, mmproj)) = llava::family_pair("minicpmv") else {
        return;
    };
    let key = b"clip.minicpmv_version";
    let mut bytes = std::fs::read(&mmproj).unwrap();
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    // The value's type (GGUF int32 is 5), then the value.
    assert_eq!(bytes[at..at + 4], 5u32.to_le_bytes());
    bytes[at + 4..at + 8].copy_from_slice(&1i32.to_le_bytes());
    let key = "clip.minicpmv_version";
    llava::refused_everywhere(&text, &bytes, &format!("'{key}'"), key);
}

/// The first MiniCPM-V case of tests/data/vision/greedy.json ("Describe." after the 250×180
/// picture: the overview and 2×2 slices, 80 image tokens) as an OpenAI `image_url` request:
/// llama-mtmd-cli's text, and the same again from the cached prefix.
#[test]
fn a_chat_image_url_answers_as_llama_mtmd_cli() {
    if let Some(n_prompt) = first_case_as_chat("minicpmv", "chatml", "Describe.", (250, 180)) {
        assert!(n_prompt > 80, "{n_prompt}");
    }
}
