//! Decoding an image file into 8-bit RGB: PNG, JPEG, GIF (its first frame), BMP and WebP, the
//! formats `llama-mtmd-cli` reads. The header's dimensions are read and bounded before any pixel
//! is decoded, so a hostile file cannot make the decoder allocate more than the limit allows.

use std::io::Cursor;

use image::{DynamicImage, ImageFormat, ImageReader, Limits};

use super::VisionError;

/// The longest side accepted, in pixels: a 8192×8192 image (64 Mi pixels) is the largest.
pub const MAX_SIDE: u32 = 8192;

/// The most bytes a decoder may allocate at once: the largest image as 16-bit RGBA.
const MAX_ALLOC: u64 = MAX_SIDE as u64 * MAX_SIDE as u64 * 8;

/// An 8-bit RGB image, rows top to bottom, pixels interleaved `R G B`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RgbImage {
    pub width: usize,
    pub height: usize,
    pub data: Vec<u8>,
}

impl RgbImage {
    /// An image of one colour.
    pub fn filled(width: usize, height: usize, rgb: [u8; 3]) -> RgbImage {
        RgbImage {
            width,
            height,
            data: rgb.repeat(width * height),
        }
    }

    /// The pixel at column `x`, row `y`.
    pub fn pixel(&self, x: usize, y: usize) -> [u8; 3] {
        let i = (y * self.width + x) * 3;
        [self.data[i], self.data[i + 1], self.data[i + 2]]
    }
}

/// The formats decoded, by name, for messages.
pub const FORMATS: &str = "PNG, JPEG, GIF, BMP or WebP";

fn format_name(f: ImageFormat) -> Option<&'static str> {
    Some(match f {
        ImageFormat::Png => "PNG",
        ImageFormat::Jpeg => "JPEG",
        ImageFormat::Gif => "GIF",
        ImageFormat::Bmp => "BMP",
        ImageFormat::WebP => "WebP",
        _ => return None,
    })
}

/// Decodes `bytes` (a whole image file) to RGB. The format is told by the file's first bytes,
/// never by a name; an alpha channel is dropped and grey is copied to all three channels, and
/// 16-bit samples keep their high byte, as stb_image (llama.cpp's decoder) does.
pub fn decode(bytes: &[u8]) -> Result<RgbImage, VisionError> {
    let reader = || {
        ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .expect("reading from memory cannot fail")
    };
    let format = reader().format();
    let name = match format.and_then(format_name) {
        Some(name) => name,
        None => return Err(VisionError::UnknownImageFormat(sniff(bytes))),
    };
    let decode_err = |e: image::ImageError| VisionError::ImageDecode {
        format: name,
        message: one_line(&e.to_string()),
    };
    let (width, height) = reader().into_dimensions().map_err(decode_err)?;
    if width > MAX_SIDE || height > MAX_SIDE {
        return Err(VisionError::ImageTooLarge { width, height });
    }
    if width == 0 || height == 0 {
        return Err(VisionError::ImageDecode {
            format: name,
            message: format!("the header says {width}×{height} pixels"),
        });
    }
    let mut r = reader();
    let mut limits = Limits::default();
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    limits.max_alloc = Some(MAX_ALLOC);
    r.limits(limits);
    let img = r.decode().map_err(decode_err)?;
    Ok(to_rgb(img))
}

/// What the first bytes look like, for the message refusing an unknown format.
fn sniff(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "the file is empty".into();
    }
    let head: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("it starts with bytes {}", head.join(" "))
}

/// The first line of a decoder's message, without a trailing period.
fn one_line(s: &str) -> String {
    s.lines()
        .next()
        .unwrap_or("")
        .trim()
        .trim_end_matches('.')
        .to_string()
}

/// RGB8 as stb_image makes it from each layout the decoders return.
fn to_rgb(img: DynamicImage) -> RgbImage {
    let (width, height) = (img.width() as usize, img.height() as usize);
    let n = width * height;
    let mut data = Vec::with_capacity(n * 3);
    match img {
        DynamicImage::ImageRgb8(b) => data = b.into_raw(),
        DynamicImage::ImageRgba8(b) => {
            for p in b.into_raw().chunks_exact(4) {
                data.extend_from_slice(&p[..3]);
            }
        }
        DynamicImage::ImageLuma8(b) => {
            for &g in b.as_raw() {
                data.extend_from_slice(&[g, g, g]);
            }
        }
        DynamicImage::ImageLumaA8(b) => {
            for p in b.as_raw().chunks_exact(2) {
                data.extend_from_slice(&[p[0], p[0], p[0]]);
            }
        }
        DynamicImage::ImageRgb16(b) => data.extend(b.as_raw().iter().map(|&v| (v >> 8) as u8)),
        DynamicImage::ImageRgba16(b) => {
            for p in b.as_raw().chunks_exact(4) {
                data.extend(p[..3].iter().map(|&v| (v >> 8) as u8));
            }
        }
        DynamicImage::ImageLuma16(b) => {
            for &g in b.as_raw() {
                let g = (g >> 8) as u8;
                data.extend_from_slice(&[g, g, g]);
            }
        }
        DynamicImage::ImageLumaA16(b) => {
            for p in b.as_raw().chunks_exact(2) {
                let g = (p[0] >> 8) as u8;
                data.extend_from_slice(&[g, g, g]);
            }
        }
        // Float layouts come only from codecs not built here; convert them the crate's way.
        other => data = other.to_rgb8().into_raw(),
    }
    debug_assert_eq!(data.len(), n * 3);
    RgbImage {
        width,
        height,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{ImageBuffer, ImageEncoder};

    fn png(width: u32, height: u32, color: image::ExtendedColorType, raw: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        image::codecs::png::PngEncoder::new(&mut out)
            .write_image(raw, width, height, color)
            .unwrap();
        out
    }

    #[test]
    fn png_rgb_and_grey_alpha() {
        let raw: Vec<u8> = (0..2 * 3 * 3).map(|i| i as u8 * 10).collect();
        let img = decode(&png(2, 3, image::ExtendedColorType::Rgb8, &raw)).unwrap();
        assert_eq!((img.width, img.height), (2, 3));
        assert_eq!(img.data, raw);
        let la = [7u8, 255, 9, 0];
        let img = decode(&png(2, 1, image::ExtendedColorType::La8, &la)).unwrap();
        assert_eq!(img.data, vec![7, 7, 7, 9, 9, 9]);
    }

    #[test]
    fn sixteen_bit_keeps_the_high_byte() {
        // The encoder takes native-endian samples: 0x12ff -> 0x12 (rounding would give 0x13).
        let raw: Vec<u8> = [0x12ffu16, 0x8000, 0xff7f]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let img = decode(&png(1, 1, image::ExtendedColorType::Rgb16, &raw)).unwrap();
        assert_eq!(img.data, vec![0x12, 0x80, 0xff]);
    }

    #[test]
    fn bmp_gif_jpeg_decode() {
        let buf: ImageBuffer<image::Rgb<u8>, _> =
            ImageBuffer::from_fn(8, 8, |x, y| image::Rgb([x as u8 * 30, y as u8 * 30, 100]));
        for fmt in [ImageFormat::Bmp, ImageFormat::Gif, ImageFormat::Jpeg] {
            let mut out = Cursor::new(Vec::new());
            DynamicImage::ImageRgb8(buf.clone())
                .write_to(&mut out, fmt)
                .unwrap();
            let img = decode(out.get_ref()).unwrap();
            assert_eq!((img.width, img.height), (8, 8), "{fmt:?}");
            if fmt == ImageFormat::Bmp {
                assert_eq!(img.data, buf.as_raw().clone());
            }
        }
    }

    #[test]
    fn refuses_unknown_empty_truncated_and_huge() {
        let e = decode(b"").unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let e = decode(b"GIF8 no").unwrap_err().to_string();
        assert!(e.contains("unknown image format"), "{e}");
        let good = png(4, 4, image::ExtendedColorType::Rgb8, &[50; 48]);
        let e = decode(&good[..good.len() - 20]).unwrap_err().to_string();
        assert!(e.starts_with("corrupt or truncated PNG"), "{e}");
        // The same PNG with a header claiming 9000×10 pixels (and its checksum fixed).
        let mut huge = good.clone();
        huge[16..20].copy_from_slice(&9000u32.to_be_bytes());
        huge[20..24].copy_from_slice(&10u32.to_be_bytes());
        let crc = crc32(&huge[12..29]);
        huge[29..33].copy_from_slice(&crc.to_be_bytes());
        let e = decode(&huge).unwrap_err().to_string();
        assert!(e.contains("9000×10"), "{e}");
    }

    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= b as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }
}
