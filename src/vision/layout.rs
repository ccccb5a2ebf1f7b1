//! How an image sits in the text model's prompt, per projector type: the text (special tokens)
//! around its rows, and whether the text model reads the rows causally. llama.cpp's mtmd keeps
//! the same facts per projector (`img_beg`/`img_end`, `mtmd_decode_use_non_causal`); a new
//! projector type fills in its arm here and the engine and front ends follow.

use super::clip::{Projector, ProjectorType};

/// The prompt layout of one image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageLayout {
    /// Text before the image's rows, tokenized with special tokens parsed (Gemma 3:
    /// `<start_of_image>`); empty for none.
    pub begin: &'static str,
    /// Text after the rows (Gemma 3: `<end_of_image>`); empty for none.
    pub end: &'static str,
    /// The text model attends causally over the rows (false: bidirectionally within the image,
    /// which needs the whole image in one batch).
    pub causal: bool,
    /// The image's token count depends on its size, so `--image-min-tokens` and
    /// `--image-max-tokens` apply (false: a fixed input size, and llama.cpp ignores them).
    pub dynamic_size: bool,
}

impl Projector {
    /// How this projector's images sit in the prompt.
    pub fn layout(&self) -> ImageLayout {
        match self.ty {
            // LLaVA 1.5: no markers; the rows replace the media marker.
            ProjectorType::Mlp => ImageLayout {
                begin: "",
                end: "",
                causal: true,
                dynamic_size: false,
            },
            // Gemma 3: `<start_of_image>` rows `<end_of_image>`, read bidirectionally.
            ProjectorType::Gemma3 => ImageLayout {
                begin: "<start_of_image>",
                end: "<end_of_image>",
                causal: false,
                dynamic_size: false,
            },
            // Idefics3 (added with the projector, for the layout's owner to complete): markers
            // go around each tile, not the whole image. llama.cpp's mtmd writes, for the tiles
            // of `preprocess_tiles` row by row, `<fake_token_around_image><row_R_col_C>` then the
            // tile's rows (R, C from 1), `\n` after each row of tiles but the last; then the
            // overview as `\n\n<fake_token_around_image><global-img>` rows
            // `<fake_token_around_image>`. The count of tiles depends on the image's size.
            ProjectorType::Idefics3 => ImageLayout {
                begin: "",
                end: "",
                causal: true,
                dynamic_size: true,
            },
        }
    }
}
