//! Image decoding and preprocessing of arbitrary bytes: format sniffing, the size limit read
//! from the header, the decoders, then LLaVA's fit-and-pad resampling and normalisation. Errors
//! are fine; panics, hangs and allocations beyond the limit are not.

#![no_main]

use libfuzzer_sys::fuzz_target;
use llamafile::vision::{self, FfnActivation, ProjectorType, VisionHparams};

fuzz_target!(|data: &[u8]| {
    let Ok(img) = vision::decode(data) else {
        return;
    };
    assert_eq!(img.data.len(), img.width * img.height * 3);
    let hp = VisionHparams {
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
    };
    let pre = vision::preprocess(&img, ProjectorType::Mlp, &hp);
    assert_eq!(pre.data.len(), 3 * 28 * 28);
    assert!(pre.data.iter().all(|v| v.is_finite()));
});
