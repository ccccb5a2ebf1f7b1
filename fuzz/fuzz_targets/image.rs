//! Image decoding and preprocessing of arbitrary bytes: format sniffing, the size limit read
//! from the header, the decoders, then each projector type's preparation (LLaVA's and Gemma
//! 3's fit-and-pad resampling, Idefics3's resizing and tiling, with and without a longest
//! side, Pixtral's own size in whole patches within its budget, MiniCPM-V's overview and
//! slices) and normalisation. Errors are
//! fine; panics, hangs and allocations beyond the limit are not.

#![no_main]

use libfuzzer_sys::fuzz_target;
use llamafile::vision::{self, FfnActivation, ProjectorType, VisionHparams};

fuzz_target!(|data: &[u8]| {
    let Ok(img) = vision::decode(data) else {
        return;
    };
    assert_eq!(img.data.len(), img.width * img.height * 3);
    // Preparing an image costs time in proportion to its pixels (up to the decoder's 64
    // Mpixel limit); under AddressSanitizer a canvas of several Mpixels through every projector
    // type outlasts libFuzzer's timeout without being a hang (the unit test
    // `a_large_canvas_prepares_for_every_projector` keeps the input that showed it). The
    // decoders and their limit are fuzzed at every size; the preparation up to one Mpixel.
    if img.width * img.height > 1 << 20 {
        return;
    }
    let mut hp = VisionHparams {
        image_size: 28,
        patch_size: 14,
        n_embd: 8,
        n_ff: 16,
        n_head: 2,
        n_layer: 2,
        eps: 1e-5,
        image_mean: [0.48, 0.46, 0.41],
        image_std: [0.27, 0.26, 0.28],
        ffn_act: FfnActivation::GeluQuick,
        feature_layers: Vec::new(),
        n_merge: 2,
        longest_edge: Some(56),
    };
    for ty in ProjectorType::ALL {
        let pre = vision::preprocess(&img, ty, &hp);
        assert_eq!(pre.data.len(), 3 * pre.width * pre.height);
        match ty {
            ProjectorType::Mlp | ProjectorType::Gemma3 | ProjectorType::Idefics3 => {
                assert_eq!((pre.width, pre.height), (28, 28))
            }
            // MiniCPM-V's overview: whole patches (not merged windows), about the input's area.
            ProjectorType::Minicpmv => {
                let (cols, rows) = (pre.width / 14, pre.height / 14);
                assert!(
                    cols >= 1 && rows >= 1 && cols * 14 == pre.width && rows * 14 == pre.height
                );
            }
            // The types that keep the image's size: whole windows of merged patches, within
            // their token budgets (at most 4096 here).
            _ => {
                let (cols, rows) = (pre.width / 28, pre.height / 28);
                assert!(
                    cols >= 1 && rows >= 1 && cols * 28 == pre.width && rows * 28 == pre.height
                );
                assert!(cols * rows <= 4096, "{cols}×{rows}");
            }
        }
        assert!(pre.data.iter().all(|v| v.is_finite()));
    }
    // MiniCPM-V's slices: the overview and at most 9 slices, each in whole patches.
    let tiles = vision::preprocess_tiles(&img, ProjectorType::Minicpmv, &hp);
    let n_slices = tiles.grid.map_or(0, |(c, r)| c * r);
    assert!(n_slices <= 9 && tiles.images.len() == n_slices + 1);
    for t in &tiles.images {
        assert!(t.width >= 14 && t.height >= 14 && t.width % 14 == 0 && t.height % 14 == 0);
    }
    let tiles = vision::preprocess_tiles(&img, ProjectorType::Idefics3, &hp);
    let (cols, rows) = tiles.grid.expect("idefics3 tiles");
    assert_eq!(tiles.images.len(), cols * rows + 1);
    assert!(cols * rows <= 4, "a longest side of two tiles");
    // Without a longest side the tiles follow the image's own size: only small images here.
    if img.width <= 200 && img.height <= 200 {
        hp.longest_edge = None;
        let tiles = vision::preprocess_tiles(&img, ProjectorType::Idefics3, &hp);
        assert_eq!(tiles.images.len(), tiles.grid.map_or(1, |(c, r)| c * r + 1));
    }
});
