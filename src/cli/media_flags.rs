//! The flags of images in, as llama-mtmd-cli and llama-server take them: `--mmproj FILE` (a
//! file, `/zip/NAME` or an entry of this llamafile, as `-m`), `--no-mmproj` (load none, even if
//! `.args` names one), `--image FILE` (repeatable), `--image-min-tokens`/`--image-max-tokens`
//! (ignored for fixed-size projectors, as llama.cpp ignores them; refused for SmolVLM's, whose
//! tiles llama.cpp then cuts another way, not built here). `--audio` is refused: no audio
//! encoder is built. `--mmproj-offload`/`--no-mmproj-offload`: the encoder on the GPU found for the
//! text model, or not (default: on, as llama.cpp). `--mmproj-device` and the video flags stay in
//! `model_flags`' table.

use clap::Args;

/// Multimodal flags.
#[derive(Args, Debug, Clone, Default)]
pub struct MediaArgs {
    /// Multimodal projector file (llama.cpp's mmproj GGUF): a path, /zip/NAME or an entry of
    /// this llamafile (env LLAMA_ARG_MMPROJ).
    #[arg(long = "mmproj", value_name = "FILE", env = "LLAMA_ARG_MMPROJ")]
    pub mmproj: Option<String>,

    /// Load the projector that is named (the default; llama.cpp also looks for one beside a
    /// downloaded model, and nothing is downloaded here) (env LLAMA_ARG_MMPROJ_AUTO).
    #[arg(long = "mmproj-auto", overrides_with = "no_mmproj")]
    pub mmproj_auto: bool,

    /// Do not load a projector, even if one is named (by .args or LLAMA_ARG_MMPROJ).
    #[arg(
        long = "no-mmproj",
        visible_alias = "no-mmproj-auto",
        overrides_with = "mmproj_auto"
    )]
    pub no_mmproj: bool,

    /// Run the image encoder's matrix products and attention on the GPU when one was found for
    /// the model (the default) (env LLAMA_ARG_MMPROJ_OFFLOAD).
    #[arg(long = "mmproj-offload", overrides_with = "no_mmproj_offload")]
    pub mmproj_offload: bool,

    /// Keep the image encoder on the CPU, even with the text model on the GPU.
    #[arg(long = "no-mmproj-offload", overrides_with = "mmproj_offload")]
    pub no_mmproj_offload: bool,

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
    /// Settles `--mmproj-auto`/`--no-mmproj` with their variable, LLAMA_ARG_MMPROJ_AUTO (the
    /// command line wins), then refuses audio.
    pub fn resolve(&mut self, m: &clap::ArgMatches) -> Result<(), String> {
        self.mmproj_auto =
            super::table::pair(m, "mmproj_auto", "no_mmproj", "LLAMA_ARG_MMPROJ_AUTO", true)?;
        self.no_mmproj = !self.mmproj_auto;
        self.mmproj_offload = super::table::pair(
            m,
            "mmproj_offload",
            "no_mmproj_offload",
            "LLAMA_ARG_MMPROJ_OFFLOAD",
            true,
        )?;
        self.no_mmproj_offload = !self.mmproj_offload;
        self.check()
    }

    /// Refuses audio.
    pub fn check(&self) -> Result<(), String> {
        if let Some(a) = self.audio.first() {
            return Err(format!(
                "--audio {a}: audio input is not built (this engine reads images only)"
            ));
        }
        Ok(())
    }

    /// Whether `--image-min-tokens` or `--image-max-tokens` asks for anything (llama.cpp
    /// applies only positive values).
    pub fn token_limits(&self) -> bool {
        [self.image_min_tokens, self.image_max_tokens]
            .iter()
            .any(|n| n.is_some_and(|n| n > 0))
    }

    /// The projector to load: `--mmproj`, unless `--no-mmproj`.
    pub fn projector(&self) -> Option<&str> {
        self.mmproj.as_deref().filter(|_| !self.no_mmproj)
    }
}
