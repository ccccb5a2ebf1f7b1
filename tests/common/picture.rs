//! The test picture of the vision tests (tests/data/vision/README.md): gradients and a few hard
//! edges, so resizing, padding and patching all show in the numbers.

use llamafile::vision::RgbImage;

/// The picture, `w`×`h`.
pub fn picture(w: usize, h: usize) -> RgbImage {
    let mut img = RgbImage::filled(w, h, [0; 3]);
    for y in 0..h {
        for x in 0..w {
            let i = (y * w + x) * 3;
            img.data[i] = (x * 255 / (w - 1)) as u8;
            img.data[i + 1] = (y * 255 / (h - 1)) as u8;
            img.data[i + 2] = if (x / 9 + y / 7) % 2 == 0 { 230 } else { 20 };
        }
    }
    img
}
