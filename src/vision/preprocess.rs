//! From a decoded image to the encoder's input, as llama.cpp's clip prepares it for each
//! projector type: LLaVA 1.5 (`mlp`) scales the image to fit the square input with Pillow's
//! bicubic filter, pads the rest with the CLIP mean colour (122, 116, 104), and normalises each
//! channel with the file's mean and standard deviation.

use super::clip::{ProjectorType, VisionHparams};
use super::image::RgbImage;
use super::resize::{fit_padded, Filter};

/// A normalised image, channel-planar: `data[c][y][x]` at `(c * height + y) * width + x`.
#[derive(Clone, Debug)]
pub struct PlanarImage {
    pub width: usize,
    pub height: usize,
    pub data: Vec<f32>,
}

/// The padding colour of LLaVA's preprocessing: CLIP's mean, in 8 bits.
const LLAVA_PAD: [u8; 3] = [122, 116, 104];

/// `img` prepared for a projector of type `ty` with hyperparameters `hp`.
pub fn preprocess(img: &RgbImage, ty: ProjectorType, hp: &VisionHparams) -> PlanarImage {
    let sized = match ty {
        ProjectorType::Mlp => fit_padded(
            img,
            hp.image_size,
            hp.image_size,
            Filter::Bicubic,
            LLAVA_PAD,
        ),
    };
    normalise(&sized, &hp.image_mean, &hp.image_std)
}

/// `(v / 255 - mean) / std` per channel, in f32 as clip computes it.
fn normalise(img: &RgbImage, mean: &[f32; 3], std: &[f32; 3]) -> PlanarImage {
    let plane = img.width * img.height;
    let mut data = vec![0f32; 3 * plane];
    for (i, px) in img.data.chunks_exact(3).enumerate() {
        for c in 0..3 {
            data[c * plane + i] = (px[c] as f32 / 255.0 - mean[c]) / std[c];
        }
    }
    PlanarImage {
        width: img.width,
        height: img.height,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalise_is_planar() {
        let img = RgbImage {
            width: 2,
            height: 1,
            data: vec![255, 0, 51, 0, 255, 102],
        };
        let p = normalise(&img, &[0.5, 0.0, 0.2], &[0.5, 1.0, 0.1]);
        assert_eq!(p.data.len(), 6);
        let want = [1.0, -1.0, 0.0, 1.0, 0.0, 2.0];
        for (got, want) in p.data.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{:?}", p.data);
        }
    }
}
