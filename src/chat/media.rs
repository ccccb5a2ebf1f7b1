//! `-p TEXT --image FILE` with a projector: one turn, as llama-mtmd-cli runs it. The prompt
//! becomes a user message (each image where the prompt has `<__media__>`, or, with no marker,
//! one marker per image before the text), rendered with the chat template (after the system
//! message of `-sys`, if any) and an assistant opening; the text is split at the markers and
//! the images' rows go between its pieces ([`Media::tokenize`]); the answer is printed as it
//! is sampled.

use std::io::Write;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::{ChatTemplate, Message, RenderOptions};
use crate::engine::media::{Image, Media, MEDIA_MARKER};
use crate::engine::{Loaded, Session};
use crate::sampling::{Sampler, TokenVocab};
use crate::tokenizer::StreamDecoder;

/// What one turn needs besides the model and the projector.
pub struct TurnOptions<'a> {
    pub prompt: &'a str,
    pub system: Option<&'a str>,
    pub images: &'a [String],
    pub template: &'a ChatTemplate,
    pub render: RenderOptions,
    pub n_ctx: usize,
    pub n_batch: usize,
    pub n_predict: i64,
    pub sampler: Sampler,
}

/// Reads an image file and encodes it, with the file named in the error.
pub fn load_image(media: &Media, path: &str) -> Result<Arc<Image>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read image {path}"))?;
    media.image(&bytes).with_context(|| format!("image {path}"))
}

/// The user message of `prompt` with `n_images` images: as given when it has a marker,
/// otherwise one marker per image before it.
pub fn user_content(prompt: &str, n_images: usize) -> String {
    if prompt.contains(MEDIA_MARKER) {
        prompt.to_string()
    } else {
        MEDIA_MARKER.repeat(n_images) + prompt
    }
}

/// Runs one turn, printing the answer to stdout.
pub fn run_turn(loaded: &Loaded, media: &Media, mut o: TurnOptions) -> Result<()> {
    let tok = &loaded.tokenizer;
    let images = o
        .images
        .iter()
        .map(|p| load_image(media, p))
        .collect::<Result<Vec<_>>>()?;
    let mut messages: Vec<Message> = o
        .system
        .iter()
        .map(|s| Message::new("system", *s))
        .collect();
    messages.push(Message::new("user", user_content(o.prompt, images.len())));
    let text = o.template.render_with(&messages, &o.render)?;
    let prompt = media.tokenize(tok, &text, &images, true)?;
    let n = prompt.len();
    if n >= o.n_ctx {
        bail!(
            "the prompt is {n} tokens long ({} of them for {} images), more than the context of {} allows (-c)",
            prompt.n_image_tokens(),
            images.len(),
            o.n_ctx
        );
    }
    let mut session = Session::try_new(&loaded.model, o.n_ctx, o.n_batch)?;
    let (logits, _) = session.feed_prompt(&prompt, n)?;
    let mut out = std::io::stdout().lock();
    let mut decoder = StreamDecoder::new();
    let mut failed = false;
    session.generate(
        logits,
        &mut o.sampler,
        o.n_predict,
        |id| tok.is_eog(id),
        |ev| {
            if ev.is_eog {
                return true;
            }
            let piece = decoder.push(tok, ev.id);
            failed = out
                .write_all(piece.as_bytes())
                .and_then(|_| out.flush())
                .is_err();
            !failed
        },
    )?;
    if !failed {
        writeln!(out, "{}", decoder.flush())?;
    }
    Ok(())
}

/// A sampler for the model's vocabulary.
pub fn sampler(loaded: &Loaded, params: crate::sampling::SamplingParams) -> Sampler {
    Sampler::new(params, Arc::new(TokenVocab::new(&loaded.tokenizer)))
}
