//! The flags of images in, as llama-mtmd-cli and llama-server take them: `--mmproj FILE` (a
//! file, `/zip/NAME` or an entry of this llamafile, as `-m`), `--no-mmproj` (load none, even if
//! `.args` names one), `--image FILE` (repeatable), `--image-min-tokens`/`--image-max-tokens`
//! (kept for projectors whose token count follows the image's size). `--audio` is refused: no
//! audio encoder is built. `--mmproj-offload` and the video flags stay in `model_flags`' table.

use clap::Args;

/// Multimodal flags.
#[derive(Args, Debug, Clone, Default)]
pub struct MediaArgs {
    /// Multimodal projector file (llama.cpp's mmproj GGUF): a path, /zip/NAME or an entry of
    /// this llamafile (env LLAMA_ARG_MMPROJ).
    #[arg(long = "mmproj", value_name = "FILE", env = "LLAMA_ARG_MMPROJ")]
    pub mmproj: Option<String>,

    /// Do not load a projector, even if one is named (by .args or LLAMA_ARG_MMPROJ).
    #[arg(long = "no-mmproj", visible_alias = "no-mmproj-auto")]
    pub no_mmproj: bool,

    /// An image for the prompt (PNG, JPEG, GIF, BMP, WebP); repeat for several. Each goes
    /// where the prompt has <__media__>, or before the text when it has none.
    #[arg(long = "image", value_name = "FILE")]
    pub image: Vec<String>,

    /// Audio input (llama.cpp's --audio): refused, no audio encoder is built.
    #[arg(long = "audio", value_name = "FILE")]
    pub audio: Vec<String>,

    /// Fewest tokens an image may become, for projectors whose token count follows the image
    /// size (ignored for fixed-size ones such as LLaVA's, as llama.cpp ignores it).
    #[arg(
        long = "image-min-tokens",
        value_name = "N",
        env = "LLAMA_ARG_IMAGE_MIN_TOKENS"
    )]
    pub image_min_tokens: Option<i64>,

    /// Most tokens an image may become (see --image-min-tokens).
    #[arg(
        long = "image-max-tokens",
        value_name = "N",
        env = "LLAMA_ARG_IMAGE_MAX_TOKENS"
    )]
    pub image_max_tokens: Option<i64>,
}

impl MediaArgs {
    /// Refuses audio.
    pub fn check(&self) -> Result<(), String> {
        if let Some(a) = self.audio.first() {
            return Err(format!(
                "--audio {a}: audio input is not built (this engine reads images only)"
            ));
        }
        Ok(())
    }

    /// The projector to load: `--mmproj`, unless `--no-mmproj`.
    pub fn projector(&self) -> Option<&str> {
        self.mmproj.as_deref().filter(|_| !self.no_mmproj)
    }
}
