//! Projector (mmproj) loading of arbitrary bytes: the GGUF, the `clip.*` metadata, every
//! tensor's shape and type, for every projector type built (`mlp`, `gemma3`, `idefics3`,
//! `pixtral`, ...); a small projector that loads is then run on a flat image (every tile of
//! it). Errors are fine; panics, hangs and reads outside the input are not.

#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use llamafile::gguf::GgufFile;
use llamafile::vision::{self, Projector, RgbImage};

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let Ok(proj) = Projector::load(Arc::new(file)) else {
        return;
    };
    let hp = &proj.hparams;
    // Only small towers run: the loader accepts real sizes, which take seconds per image.
    if hp.image_size > 64 || hp.n_embd > 256 || hp.n_ff > 1024 || proj.n_embd_out() > 1024 {
        return;
    }
    let img = RgbImage::filled(5, 3, [120, 30, 200]);
    if proj.n_tokens_for(img.width, img.height) > 16 * proj.n_image_tokens() {
        return; // many tiles (a long `preproc_image_size`): slow, not different
    }
    let tiles = vision::preprocess_tiles(&img, proj.ty, hp);
    let mut n = 0;
    for tile in &tiles.images {
        n += proj.encode(tile).len();
    }
    let want = proj.n_tokens_for(img.width, img.height) * proj.n_embd_out();
    assert_eq!(n, want);
});
