//! Resampling 8-bit RGB images the way Pillow does (and llama.cpp's clip after it): separable
//! filters, weights normalised per output pixel and rounded to 22-bit fixed point, one
//! horizontal pass then one vertical pass, each rounding to 8 bits. Plus fitting an image into a
//! target size with its aspect ratio kept and the rest filled with a colour.

use super::image::RgbImage;

/// The resampling filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    Bilinear,
    /// Keys' cubic with a = -0.5, Pillow's bicubic.
    Bicubic,
    Lanczos3,
}

impl Filter {
    fn support(self) -> f64 {
        match self {
            Filter::Bilinear => 1.0,
            Filter::Bicubic => 2.0,
            Filter::Lanczos3 => 3.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        match self {
            Filter::Bilinear => {
                let x = x.abs();
                if x < 1.0 {
                    1.0 - x
                } else {
                    0.0
                }
            }
            Filter::Bicubic => {
                const A: f64 = -0.5;
                let x = x.abs();
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Filter::Lanczos3 => {
                if (-3.0..3.0).contains(&x) {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let px = x * std::f64::consts::PI;
        px.sin() / px
    }
}

/// Fraction bits of the fixed-point weights: 32 bits less 8 for the pixel and 2 of headroom.
const FRAC_BITS: u32 = 22;

/// For each output pixel along one axis: the first input pixel, and the fixed-point weights of
/// the input pixels from there on.
struct Taps {
    start: Vec<usize>,
    weights: Vec<Vec<i32>>,
}

fn taps(in_len: usize, out_len: usize, filter: Filter) -> Taps {
    let scale = in_len as f64 / out_len as f64;
    let filter_scale = scale.max(1.0);
    let support = filter.support() * filter_scale;
    // Distances are scaled by multiplying with the reciprocal, not by dividing: the weights
    // are rounded to fixed point, where the last bit of a double can flip a pixel.
    let inv_scale = 1.0 / filter_scale;
    let mut start = Vec::with_capacity(out_len);
    let mut weights = Vec::with_capacity(out_len);
    for o in 0..out_len {
        let center = (o as f64 + 0.5) * scale;
        // Truncation toward zero, as the C casts do (the value may be negative).
        let lo = ((center - support + 0.5) as i64).max(0) as usize;
        let hi = ((center + support + 0.5) as i64).min(in_len as i64) as usize;
        let hi = hi.max(lo);
        let raw: Vec<f64> = (lo..hi)
            .map(|i| filter.weight((i as f64 - center + 0.5) * inv_scale))
            .collect();
        let total: f64 = raw.iter().sum();
        let fixed = raw
            .iter()
            .map(|&w| {
                let w = if total != 0.0 { w / total } else { w };
                let v = w * (1u64 << FRAC_BITS) as f64;
                (v + if w < 0.0 { -0.5 } else { 0.5 }) as i32
            })
            .collect();
        start.push(lo);
        weights.push(fixed);
    }
    Taps { start, weights }
}

fn clamp8(acc: i32) -> u8 {
    (acc >> FRAC_BITS).clamp(0, 255) as u8
}

const HALF: i32 = 1 << (FRAC_BITS - 1);

fn horizontal(img: &RgbImage, out_w: usize, filter: Filter) -> RgbImage {
    let t = taps(img.width, out_w, filter);
    let mut data = vec![0u8; out_w * img.height * 3];
    for (src, dst) in img
        .data
        .chunks_exact(img.width * 3)
        .zip(data.chunks_exact_mut(out_w * 3))
    {
        for (o, px) in dst.chunks_exact_mut(3).enumerate() {
            let mut acc = [HALF; 3];
            for (k, &w) in t.weights[o].iter().enumerate() {
                let p = &src[(t.start[o] + k) * 3..][..3];
                for c in 0..3 {
                    acc[c] += p[c] as i32 * w;
                }
            }
            for c in 0..3 {
                px[c] = clamp8(acc[c]);
            }
        }
    }
    RgbImage {
        width: out_w,
        height: img.height,
        data,
    }
}

fn vertical(img: &RgbImage, out_h: usize, filter: Filter) -> RgbImage {
    let t = taps(img.height, out_h, filter);
    let row = img.width * 3;
    let mut data = vec![0u8; row * out_h];
    let mut acc = vec![0i32; row];
    for (o, dst) in data.chunks_exact_mut(row).enumerate() {
        acc.fill(HALF);
        for (k, &w) in t.weights[o].iter().enumerate() {
            let src = &img.data[(t.start[o] + k) * row..][..row];
            for (a, &p) in acc.iter_mut().zip(src) {
                *a += p as i32 * w;
            }
        }
        for (d, &a) in dst.iter_mut().zip(&acc) {
            *d = clamp8(a);
        }
    }
    RgbImage {
        width: img.width,
        height: out_h,
        data,
    }
}

/// `img` resampled to `width`×`height` (both at least 1).
pub fn resize(img: &RgbImage, width: usize, height: usize, filter: Filter) -> RgbImage {
    let wide = if width != img.width {
        horizontal(img, width, filter)
    } else {
        img.clone()
    };
    if height != wide.height {
        vertical(&wide, height, filter)
    } else {
        wide
    }
}

/// `img` scaled to fit inside `width`×`height` with its aspect ratio kept (each side rounded
/// up, at most the target), centred on a canvas of `fill` colour. An image of the target's
/// size is returned as it is.
pub fn fit_padded(
    img: &RgbImage,
    width: usize,
    height: usize,
    filter: Filter,
    fill: [u8; 3],
) -> RgbImage {
    if (img.width, img.height) == (width, height) {
        return img.clone();
    }
    let scale = (width as f32 / img.width as f32).min(height as f32 / img.height as f32);
    let new_w = ((img.width as f32 * scale).ceil() as usize).clamp(1, width);
    let new_h = ((img.height as f32 * scale).ceil() as usize).clamp(1, height);
    let scaled = resize(img, new_w, new_h, filter);
    let mut out = RgbImage::filled(width, height, fill);
    let (ox, oy) = ((width - new_w) / 2, (height - new_h) / 2);
    for y in 0..new_h {
        let src = &scaled.data[y * new_w * 3..][..new_w * 3];
        out.data[((oy + y) * width + ox) * 3..][..new_w * 3].copy_from_slice(src);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gradient(w: usize, h: usize) -> RgbImage {
        let mut img = RgbImage::filled(w, h, [0; 3]);
        for y in 0..h {
            for x in 0..w {
                let i = (y * w + x) * 3;
                img.data[i] = (x * 255 / w.max(2).saturating_sub(1).max(1)) as u8;
                img.data[i + 1] = (y * 17 % 256) as u8;
                img.data[i + 2] = ((x * 7 + y * 13) % 256) as u8;
            }
        }
        img
    }

    #[test]
    fn a_flat_image_stays_flat() {
        let img = RgbImage::filled(7, 5, [10, 200, 99]);
        for f in [Filter::Bilinear, Filter::Bicubic, Filter::Lanczos3] {
            for (w, h) in [(3, 2), (16, 11), (7, 9)] {
                let out = resize(&img, w, h, f);
                assert_eq!(out, RgbImage::filled(w, h, [10, 200, 99]), "{f:?} {w}x{h}");
            }
        }
    }

    #[test]
    fn halving_with_bilinear_averages_pairs() {
        // At scale 2 the bilinear filter is stretched to a support of 2 input pixels.
        let mut img = RgbImage::filled(4, 1, [0; 3]);
        for (x, v) in [0u8, 80, 160, 240].iter().enumerate() {
            img.data[x * 3..x * 3 + 3].copy_from_slice(&[*v; 3]);
        }
        let out = resize(&img, 2, 1, Filter::Bilinear);
        // Output 0: centre 1.0, taps x=0..3 at distances 0.5,0.5,1.5 (/2): w = .75,.75,.25.
        // (0·.75 + 80·.75 + 160·.25) / 1.75 = 57.14 -> 57.
        assert_eq!(out.data[0], 57);
        // Output 1: centre 3.0, taps x=1..4: 80·.25 + 160·.75 + 240·.75 over 1.75 = 182.86.
        assert_eq!(out.data[3], 183);
    }

    #[test]
    fn fit_pads_the_short_side_centred() {
        let img = gradient(8, 4);
        let out = fit_padded(&img, 6, 6, Filter::Bicubic, [1, 2, 3]);
        assert_eq!((out.width, out.height), (6, 6));
        // 8x4 -> 6x3, offset (0, 1): rows 0, 4 and 5 are the fill colour.
        for y in [0, 4, 5] {
            for x in 0..6 {
                assert_eq!(out.pixel(x, y), [1, 2, 3]);
            }
        }
        let scaled = resize(&img, 6, 3, Filter::Bicubic);
        assert_eq!(out.pixel(2, 2), scaled.pixel(2, 1));
        assert_eq!(fit_padded(&img, 8, 4, Filter::Bicubic, [0; 3]), img);
    }
}
