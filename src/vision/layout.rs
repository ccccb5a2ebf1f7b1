//! How an image sits in the text model's prompt, per projector type: the text (special tokens)
//! around its rows, where the tiles of an image cut into tiles go, and whether the text model
//! reads the rows causally. llama.cpp's mtmd keeps the same facts per projector
//! (`img_beg`/`img_end`, its slice template, `mtmd_decode_use_non_causal`); a new projector
//! type fills in its arm here and the engine and front ends follow.

use super::clip::{Head, Projector, ProjectorType};

/// The prompt layout of one image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageLayout {
    /// Text before the image's rows, tokenized with special tokens parsed (Gemma 3:
    /// `<start_of_image>`); empty for none.
    pub begin: &'static str,
    /// Text after the rows (Gemma 3: `<end_of_image>`); empty for none.
    pub end: &'static str,
    /// How the tiles and the overview of an image cut into tiles are laid out; `None` for a
    /// projector that encodes an image as one input.
    pub tiles: Option<TileLayout>,
    /// The text model attends causally over the rows (false: bidirectionally within each
    /// batch of an image's rows, as llama.cpp decodes them with causal attention off).
    pub causal: bool,
    /// The image's token count depends on its size, so `--image-min-tokens` and
    /// `--image-max-tokens` would apply (false: a fixed input size, and llama.cpp ignores them).
    pub dynamic_size: bool,
}

/// Where the tiles of an image go, row by row, and its overview (after them, or before them
/// where `overview_first`), as mtmd's slice templates place them. Token lists name tokens by
/// their text, looked up in the vocabulary as mtmd looks them up (the first id whose piece is
/// that text), not tokenized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TileLayout {
    /// The overview comes (and is encoded) before the tiles (MiniCPM-V), not after them.
    pub overview_first: bool,
    /// Tokens before all the tiles (MiniCPM-V 2.5's `<slice>`), if there are any.
    pub tiles_begin: &'static [&'static str],
    /// Tokens after all the tiles.
    pub tiles_end: &'static [&'static str],
    /// Text before each tile, tokenized with special tokens parsed, with `{row}` and `{col}`
    /// replaced by the tile's row and column counted from 1.
    pub tile_begin: &'static str,
    /// Tokens before each tile, after its text.
    pub tile_open: &'static [&'static str],
    /// Tokens after each tile.
    pub tile_close: &'static [&'static str],
    /// Tokens after each row of tiles but the last.
    pub row_end: &'static [&'static str],
    /// Tokens before the overview's rows.
    pub overview_begin: &'static [&'static str],
    /// Tokens after them.
    pub overview_end: &'static [&'static str],
}

impl TileLayout {
    /// No text or tokens anywhere, the overview last.
    pub const NONE: TileLayout = TileLayout {
        overview_first: false,
        tiles_begin: &[],
        tiles_end: &[],
        tile_begin: "",
        tile_open: &[],
        tile_close: &[],
        row_end: &[],
        overview_begin: &[],
        overview_end: &[],
    };

    /// The text before the tile in row `row` and column `col` (from 0).
    pub fn tile_text(&self, row: usize, col: usize) -> String {
        self.tile_begin
            .replace("{row}", &(row + 1).to_string())
            .replace("{col}", &(col + 1).to_string())
    }
}

impl Projector {
    /// How this projector's images sit in the prompt.
    pub fn layout(&self) -> ImageLayout {
        match self.ty {
            // LLaVA 1.5: no markers; the rows replace the media marker.
            ProjectorType::Mlp => ImageLayout {
                begin: "",
                end: "",
                tiles: None,
                causal: true,
                dynamic_size: false,
            },
            // Gemma 3: `<start_of_image>` rows `<end_of_image>`, read bidirectionally.
            ProjectorType::Gemma3 => ImageLayout {
                begin: "<start_of_image>",
                end: "<end_of_image>",
                tiles: None,
                causal: false,
                dynamic_size: false,
            },
            // Idefics3: `<fake_token_around_image><row_R_col_C>` before each tile, `\n` after
            // each row of tiles but the last, then `\n\n<fake_token_around_image><global-img>`
            // the overview `<fake_token_around_image>` (Hugging Face's Idefics3 processor
            // writes the same). The count of tiles depends on the image's size.
            ProjectorType::Idefics3 => ImageLayout {
                begin: "",
                end: "",
                tiles: Some(TileLayout {
                    tile_begin: "<fake_token_around_image><row_{row}_col_{col}>",
                    row_end: &["\n"],
                    overview_begin: &["\n\n", "<fake_token_around_image>", "<global-img>"],
                    overview_end: &["<fake_token_around_image>"],
                    ..TileLayout::NONE
                }),
                causal: true,
                dynamic_size: true,
            },
            // Pixtral: the rows (with `[IMG_BREAK]` rows among them, from the projector), then
            // `[IMG_END]`.
            // Qwen2-VL and Qwen2.5-VL: `<|vision_start|>` rows `<|vision_end|>`.
            ProjectorType::Qwen2vl | ProjectorType::Qwen25vl => ImageLayout {
                begin: "<|vision_start|>",
                end: "<|vision_end|>",
                tiles: None,
                causal: true,
                dynamic_size: true,
            },
            ProjectorType::Pixtral => ImageLayout {
                begin: "",
                end: "[IMG_END]",
                tiles: None,
                causal: true,
                dynamic_size: true,
            },
            // Llama 4: `<|image_start|>`, the tiles row by row with nothing between them (this
            // mtmd sets none of its slice tokens for Llama 4), the overview, `<|image_end|>`.
            // The count of tiles depends on the image's size, but through a fixed set of grids:
            // llama.cpp reads no token budget for it.
            ProjectorType::Llama4 => ImageLayout {
                begin: "<|image_start|>",
                end: "<|image_end|>",
                tiles: Some(TileLayout::NONE),
                causal: true,
                dynamic_size: false,
            },
            // MiniCPM-V: `<image>` overview `</image>`, then each slice between `<slice>` and
            // `</slice>` (2.5: all the slices between `<slice>` and `</slice>`, each between
            // `<image>` and `</image>`), `\n` after each row of slices but the last. A fixed
            // count of tokens per slice; llama.cpp reads no token budget for it.
            ProjectorType::Minicpmv => {
                let slices = TileLayout {
                    overview_first: true,
                    tile_open: &["<slice>"],
                    tile_close: &["</slice>"],
                    row_end: &["\n"],
                    overview_begin: &["<image>"],
                    overview_end: &["</image>"],
                    ..TileLayout::NONE
                };
                let v25 = matches!(&self.head, Head::Minicpmv(m) if m.version == 2);
                let tiles = match v25 {
                    true => TileLayout {
                        tiles_begin: &["<slice>"],
                        tiles_end: &["</slice>"],
                        tile_open: &["<image>"],
                        tile_close: &["</image>"],
                        ..slices
                    },
                    false => slices,
                };
                ImageLayout {
                    begin: "",
                    end: "",
                    tiles: Some(tiles),
                    causal: true,
                    dynamic_size: false,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_are_named_from_one() {
        let t = TileLayout {
            tile_begin: "<r{row}c{col}>",
            ..TileLayout::NONE
        };
        assert_eq!(t.tile_text(0, 2), "<r1c3>");
    }
}
