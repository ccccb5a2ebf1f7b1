//! From a decoded image to the encoder's inputs, as llama.cpp's clip prepares them for each
//! projector type, every input normalised per channel with the file's mean and standard
//! deviation:
//! - LLaVA 1.5 (`mlp`) scales the image to fit the square input with Pillow's bicubic filter
//!   and pads the rest with the CLIP mean colour (122, 116, 104);
//! - Gemma 3 (`gemma3`) does the same with the bilinear filter and black padding (this
//!   llama.cpp keeps the aspect ratio; Hugging Face's processor stretches);
//! - Idefics3 (`idefics3`) cuts the image into tiles of the input size, in rows, and adds an
//!   overview of the whole image, encoded last. With `clip.vision.preproc_image_size` (files
//!   converted today): Lanczos-resized so that its longer side is that size (the other side
//!   truncated, then made even), Lanczos-resized again up to whole tiles, cut; the overview is
//!   that resized down to one tile. Without it: the overview is the image bicubic-resized to
//!   one tile; the tiles come from the image fitted (bicubic, aspect kept, black padding) into
//!   its size rounded to whole tiles (at least one per side);
//! - Pixtral (`pixtral`), Qwen2-VL and Qwen2.5-VL keep the image's own size, fitted (bicubic,
//!   aspect kept, black padding) into whole patches (Qwen: whole 2×2 windows of patches)
//!   within their token budgets ([`fit_to_steps`]);
//! - Llama 4 (`llama4`) cuts an image larger than the input size into tiles as LLaVA-UHD does
//!   with a fixed set of grids (the image fitted, bicubic, aspect kept, black padding, into the
//!   best grid up to 3×3: `llama4::refined_size`), in rows, and adds an overview (the image
//!   bicubic-stretched to the input size), encoded last; a smaller image is the overview alone;
//! - MiniCPM-V (`resampler`) slices an image larger than the input size as LLaVA-UHD does
//!   (`minicpmv::slice_plan`): the overview (bicubic-stretched to about the input's area, aspect
//!   kept, in whole patches) first, then the slices (the image fitted, bicubic, black padding,
//!   into the refined size and cut, in rows); a smaller image is the overview alone, stretched
//!   to the input square.

use super::clip::{ProjectorType, VisionHparams};
use super::image::RgbImage;
use super::resize::{fit_padded, resize, Filter};

/// The size clip's `calc_size_preserved_ratio` gives an image of `width`×`height` for steps of
/// `align` pixels (one image token each way) and a budget of `min_tokens` to `max_tokens`: each
/// side rounded to whole steps (at least one), then, if that is more pixels than the budget
/// allows (or fewer), both sides scaled by one factor to fit, rounded down (up) to whole steps;
/// in f32 as clip computes it.
pub(super) fn fit_to_steps(
    width: usize,
    height: usize,
    align: usize,
    min_tokens: usize,
    max_tokens: usize,
) -> (usize, usize) {
    let area = align * align;
    let (min_px, max_px) = (min_tokens * area, max_tokens * area);
    let f = align as f32;
    let by = |x: f32, how: fn(f32) -> f32| how(x / f) as usize * align;
    let (wf, hf) = (width as f32, height as f32);
    let mut w = by(wf, f32::round).max(align);
    let mut h = by(hf, f32::round).max(align);
    if w * h > max_px {
        let beta = (hf * wf / max_px as f32).sqrt();
        h = by(hf / beta, f32::floor).max(align);
        w = by(wf / beta, f32::floor).max(align);
    } else if w * h < min_px {
        let beta = (min_px as f32 / (hf * wf)).sqrt();
        h = by(hf * beta, f32::ceil);
        w = by(wf * beta, f32::ceil);
    }
    (w, h)
}

/// A normalised image, channel-planar: `data[c][y][x]` at `(c * height + y) * width + x`.
#[derive(Clone, Debug)]
pub struct PlanarImage {
    pub width: usize,
    pub height: usize,
    pub data: Vec<f32>,
}

/// The padding colour of LLaVA's preprocessing: CLIP's mean, in 8 bits.
const LLAVA_PAD: [u8; 3] = [122, 116, 104];

/// The encoder inputs of one image, in the order llama.cpp encodes them.
#[derive(Clone, Debug)]
pub struct Tiles {
    /// Each input, in the order llama.cpp encodes them: for `idefics3` (and `llama4` when the
    /// image is larger than one tile) the tiles row by row, then the overview; for `resampler`
    /// (MiniCPM-V) the overview, then the slices row by row; otherwise the one input.
    pub images: Vec<PlanarImage>,
    /// `idefics3`, `llama4`, `resampler`: the tiles' columns and rows (`images` holds
    /// `cols · rows` tiles and the overview); `None` for a single input.
    pub grid: Option<(usize, usize)>,
}

/// The whole of `img` as one input of the projector's size, for a projector of type `ty`
/// with hyperparameters `hp`: what the projector encodes for `mlp` and `gemma3`, the overview
/// for `idefics3` and `llama4` (whose full input is [`preprocess_tiles`]).
pub fn preprocess(img: &RgbImage, ty: ProjectorType, hp: &VisionHparams) -> PlanarImage {
    let sz = hp.image_size;
    let sized = match ty {
        ProjectorType::Mlp => fit_padded(img, sz, sz, Filter::Bicubic, LLAVA_PAD),
        ProjectorType::Gemma3 => fit_padded(img, sz, sz, Filter::Bilinear, [0; 3]),
        ProjectorType::Idefics3 => idefics3(img, hp).1,
        ProjectorType::Llama4 => resize(img, sz, sz, Filter::Bicubic),
        ProjectorType::Minicpmv => {
            let (w, h) = super::minicpmv::slice_plan(img.width, img.height, hp).overview;
            resize(img, w, h, Filter::Bicubic)
        }
        ProjectorType::Pixtral => {
            let (w, h) = super::pixtral::target_size(img.width, img.height, hp);
            fit_padded(img, w, h, Filter::Bicubic, [0; 3])
        }
        ProjectorType::Qwen2vl | ProjectorType::Qwen25vl => {
            let (w, h) = super::qwen2vl::target_size(img.width, img.height, hp);
            fit_padded(img, w, h, Filter::Bicubic, [0; 3])
        }
    };
    normalise(&sized, &hp.image_mean, &hp.image_std)
}

/// Every input the projector encodes for `img`, as llama.cpp's mtmd prepares them.
pub fn preprocess_tiles(img: &RgbImage, ty: ProjectorType, hp: &VisionHparams) -> Tiles {
    let norm = |i: &RgbImage| normalise(i, &hp.image_mean, &hp.image_std);
    match ty {
        ProjectorType::Mlp
        | ProjectorType::Gemma3
        | ProjectorType::Pixtral
        | ProjectorType::Qwen2vl
        | ProjectorType::Qwen25vl => Tiles {
            images: vec![preprocess(img, ty, hp)],
            grid: None,
        },
        ProjectorType::Idefics3 => {
            let (refined, overview) = idefics3(img, hp);
            let t = hp.image_size;
            let (cols, rows) = (refined.width / t, refined.height / t);
            let mut images: Vec<_> = cells(&refined, cols, rows).map(|c| norm(&c)).collect();
            images.push(norm(&overview));
            Tiles {
                images,
                grid: Some((cols, rows)),
            }
        }
        ProjectorType::Minicpmv => {
            let plan = super::minicpmv::slice_plan(img.width, img.height, hp);
            let overview = norm(&resize(
                img,
                plan.overview.0,
                plan.overview.1,
                Filter::Bicubic,
            ));
            let Some(((rw, rh), (cols, rows))) = plan.refined else {
                return Tiles {
                    images: vec![overview],
                    grid: None,
                };
            };
            let refined = fit_padded(img, rw, rh, Filter::Bicubic, [0; 3]);
            let mut images = vec![overview];
            images.extend(cells(&refined, cols, rows).map(|c| norm(&c)));
            Tiles {
                images,
                grid: Some((cols, rows)),
            }
        }
        ProjectorType::Llama4 => {
            let t = hp.image_size;
            let overview = norm(&resize(img, t, t, Filter::Bicubic));
            let Some((rw, rh)) = super::llama4::refined_size(img.width, img.height, t) else {
                return Tiles {
                    images: vec![overview],
                    grid: None,
                };
            };
            let refined = fit_padded(img, rw, rh, Filter::Bicubic, [0; 3]);
            let (cols, rows) = (rw / t, rh / t);
            let mut images: Vec<_> = cells(&refined, cols, rows).map(|c| norm(&c)).collect();
            images.push(overview);
            Tiles {
                images,
                grid: Some((cols, rows)),
            }
        }
    }
}

/// The tiles' columns and rows llama.cpp cuts an image of `width`×`height` into, for a
/// projector of type `ty` (`None`: a single input), computed without touching the pixels, so
/// that an image's token count can be checked before it is prepared.
pub fn tile_grid(
    width: usize,
    height: usize,
    ty: ProjectorType,
    hp: &VisionHparams,
) -> Option<(usize, usize)> {
    match ty {
        ProjectorType::Mlp
        | ProjectorType::Gemma3
        | ProjectorType::Pixtral
        | ProjectorType::Qwen2vl
        | ProjectorType::Qwen25vl => None,
        ProjectorType::Idefics3 => {
            let t = hp.image_size;
            let (w, h) = idefics3_sizes(width, height, hp).1;
            Some((w / t, h / t))
        }
        ProjectorType::Llama4 => {
            let t = hp.image_size;
            let (w, h) = super::llama4::refined_size(width, height, t)?;
            Some((w / t, h / t))
        }
        ProjectorType::Minicpmv => super::minicpmv::slice_plan(width, height, hp)
            .refined
            .map(|r| r.1),
    }
}

/// Idefics3's resized size (with `longest_edge`) and refined size (whole tiles per side).
fn idefics3_sizes(
    width: usize,
    height: usize,
    hp: &VisionHparams,
) -> ((usize, usize), (usize, usize)) {
    let t = hp.image_size;
    match hp.longest_edge {
        Some(longest) => {
            let aspect = width as f64 / height as f64;
            // Sides are at least 1 here, where llama.cpp would fail on a 0 (an image more than
            // `longest` times wider than tall).
            let even = |n: usize| (n + n % 2).max(1);
            let (w, h) = if width >= height {
                (longest, even((longest as f64 / aspect) as usize))
            } else {
                (even((longest as f64 * aspect) as usize), longest)
            };
            ((w, h), (w.div_ceil(t) * t, h.div_ceil(t) * t))
        }
        None => {
            // Each side rounded to the nearest whole tile (at least one), in f32 like clip.
            let round = |n: usize| (((n as f32 / t as f32).round() as usize) * t).max(t);
            ((width, height), (round(width), round(height)))
        }
    }
}

/// Idefics3's refined image (whole tiles per side) and its overview (one tile).
fn idefics3(img: &RgbImage, hp: &VisionHparams) -> (RgbImage, RgbImage) {
    let t = hp.image_size;
    let ((w, h), (rw, rh)) = idefics3_sizes(img.width, img.height, hp);
    match hp.longest_edge {
        Some(_) => {
            let resized = resize(img, w, h, Filter::Lanczos3);
            let refined = resize(&resized, rw, rh, Filter::Lanczos3);
            let overview = resize(&refined, t, t, Filter::Lanczos3);
            (refined, overview)
        }
        None => {
            let overview = resize(img, t, t, Filter::Bicubic);
            let refined = fit_padded(img, rw, rh, Filter::Bicubic, [0; 3]);
            (refined, overview)
        }
    }
}

/// `img` cut into a grid of `cols` × `rows` equal cells, row by row.
fn cells(img: &RgbImage, cols: usize, rows: usize) -> impl Iterator<Item = RgbImage> + '_ {
    let (w, h) = (img.width / cols, img.height / rows);
    (0..rows * cols).map(move |k| crop(img, k % cols * w, k / cols * h, w, h))
}

/// The `w`×`h` part of `img` whose top-left corner is (`x`, `y`).
fn crop(img: &RgbImage, x: usize, y: usize, w: usize, h: usize) -> RgbImage {
    let mut data = Vec::with_capacity(w * h * 3);
    for row in y..y + h {
        data.extend_from_slice(&img.data[(row * img.width + x) * 3..][..w * 3]);
    }
    RgbImage {
        width: w,
        height: h,
        data,
    }
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

    fn hp(image_size: usize, longest_edge: Option<usize>) -> VisionHparams {
        VisionHparams {
            n_merge: 2,
            longest_edge,
            ..VisionHparams::tiny(image_size, 2)
        }
    }

    /// A 4098×2049 GIF (a one-pixel frame on a large canvas) that the image fuzz target ran
    /// past libFuzzer's 15 s under AddressSanitizer, preparing it for every projector type:
    /// large downscales do work in proportion to the canvas, a few milliseconds per type here.
    #[test]
    fn a_large_canvas_prepares_for_every_projector() {
        let gif: [u8; 48] = [
            0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x02, 0x10, 0x01, 0x08, 0x80, 0x00, 0x00, 0xff,
            0x00, 0x00, 0x00, 0x00, 0xff, 0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2c,
            0x00, 0x00, 0x01, 0x2c, 0xff, 0x00, 0x00, 0x00, 0x7a, 0x02, 0x00, 0x02, 0x00, 0x00,
            0x02, 0x02, 0x84, 0x51, 0x00, 0x3b,
        ];
        let img = crate::vision::decode(&gif).expect("the canvas decodes");
        assert_eq!((img.width, img.height), (4098, 2049));
        let h = hp(28, Some(56));
        for ty in ProjectorType::ALL {
            let pre = preprocess(&img, ty, &h);
            assert_eq!(pre.data.len(), 3 * pre.width * pre.height, "{ty:?}");
            assert!(pre.data.iter().all(|v| v.is_finite()), "{ty:?}");
        }
    }

    #[test]
    fn idefics3_tiles_then_overview() {
        let img = RgbImage::filled(9, 3, [10, 20, 30]);
        // Without a longest side: 9/4 rounds to 2 tiles, 3/4 to 1.
        let h = hp(4, None);
        let t = preprocess_tiles(&img, ProjectorType::Idefics3, &h);
        assert_eq!(t.grid, Some((2, 1)));
        assert_eq!(tile_grid(9, 3, ProjectorType::Idefics3, &h), Some((2, 1)));
        assert_eq!(t.images.len(), 3);
        assert!(t.images.iter().all(|i| (i.width, i.height) == (4, 4)));
        // The tiles come from the image fitted into 8×4 with black padding: 8×3 (ceil) at row
        // 0, then one black row; the flat colour survives resampling.
        let v = |c: u8| (c as f32 / 255.0 - 0.5) / 0.5;
        assert_eq!(t.images[0].data[0], v(10));
        assert_eq!(t.images[0].data[3 * 4], v(0), "row 3 is padding");
        // With a longest side of 12: 12 × (12/3 = 4) → 3×1 tiles of 4.
        let h = hp(4, Some(12));
        let t = preprocess_tiles(&img, ProjectorType::Idefics3, &h);
        assert_eq!((t.grid, t.images.len()), (Some((3, 1)), 4));
        // A portrait image: the short side truncated then made even (12 · 3/9 = 4).
        assert_eq!(
            tile_grid(3, 9, ProjectorType::Idefics3, &h),
            Some((1, 3)),
            "4 wide, 12 tall"
        );
        // One input for the other types.
        let t = preprocess_tiles(&img, ProjectorType::Gemma3, &h);
        assert_eq!((t.grid, t.images.len()), (None, 1));
    }

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
