//! `--chat`: an interactive conversation in the terminal. Each user line becomes a message; the
//! whole conversation is rendered with the chat template and only the tokens after the part
//! already in the KV cache are fed, so a long conversation costs one turn per turn. With a
//! projector, `/image PATH` (as in llama-mtmd-cli) adds an image to the next message: its
//! marker goes before that message's text, and its rows into the prompt where the rendered
//! conversation has the marker.

use super::media::load_image;
use super::reasoning::{budget_spec, thinks};
use super::{ChatTemplate, Message, RenderOptions};
use crate::engine::media::{Image, Media, MediaPrompt, MEDIA_MARKER};
use crate::engine::session::Session;
use crate::engine::PlacedModel;
use crate::sampling::{Sampler, SamplingParams, TokenVocab};
use crate::tokenizer::{StreamDecoder, Tokenizer};
use std::io::{BufRead, Write};
use std::sync::Arc;

/// Settings of a terminal conversation.
#[derive(Clone, Debug)]
pub struct ChatOptions {
    /// First message of the conversation, with the role `system`.
    pub system: Option<String>,
    pub sampling: SamplingParams,
    pub n_ctx: usize,
    pub n_batch: usize,
    /// Most tokens per answer (negative: until the end of the turn or a full context).
    pub n_predict: i64,
    /// Variables the template is given (`--chat-template-kwargs`, `enable_thinking`).
    pub template_kwargs: serde_json::Map<String, serde_json::Value>,
    /// Tokens a thought may run (`None`: unlimited) and the text forced before its end tag.
    pub reasoning_budget: Option<usize>,
    pub reasoning_budget_message: String,
}

/// Reads user lines from `input` until end of input (or `/exit`), writing answers to `out`.
pub fn run_chat(
    model: &PlacedModel,
    tok: &Tokenizer,
    template: &ChatTemplate,
    opts: &ChatOptions,
    input: &mut impl BufRead,
    out: &mut impl Write,
    media: Option<&Media>,
) -> anyhow::Result<()> {
    let mut messages: Vec<Message> = opts
        .system
        .iter()
        .map(|s| Message::new("system", s.clone()))
        .collect();
    // The images of each message, in order.
    let mut images: Vec<Vec<Arc<Image>>> = messages.iter().map(|_| Vec::new()).collect();
    // Images loaded for the next message.
    let mut pending: Vec<Arc<Image>> = Vec::new();
    let mut session = Session::try_new(model, opts.n_ctx, opts.n_batch)?;
    let vocab = Arc::new(TokenVocab::new(tok));
    let mut sampler = Sampler::new(opts.sampling.clone(), vocab.clone());
    let render = RenderOptions {
        add_generation_prompt: true,
        tools: None,
        kwargs: opts.template_kwargs.clone(),
    };
    let mut line = String::new();
    loop {
        write!(out, "> ")?;
        out.flush()?;
        line.clear();
        if input.read_line(&mut line)? == 0 {
            writeln!(out)?;
            return Ok(());
        }
        let text = line.trim_end_matches(['\r', '\n']);
        if text.trim().is_empty() {
            continue;
        }
        if text.trim() == "/exit" {
            return Ok(());
        }
        if let Some(path) = text.trim().strip_prefix("/image") {
            let path = path.trim();
            match (media, path.is_empty()) {
                (None, _) => writeln!(out, "[/image needs a projector: start with --mmproj FILE]")?,
                (_, true) => writeln!(out, "[/image PATH: name the image file]")?,
                (Some(m), false) => match load_image(m, path) {
                    Ok(img) => {
                        pending.push(img);
                        writeln!(out, "{path} image loaded")?;
                    }
                    Err(e) => writeln!(out, "[{e:#}]")?,
                },
            }
            continue;
        }
        let content = MEDIA_MARKER.repeat(pending.len()) + text;
        messages.push(Message::new("user", content));
        images.push(std::mem::take(&mut pending));
        let prompt_of = |text: &str, images: &[Vec<Arc<Image>>]| match media {
            Some(m) => {
                let all: Vec<Arc<Image>> = images.iter().flatten().cloned().collect();
                m.tokenize(tok, text, &all, true)
            }
            None => Ok(MediaPrompt::text(tok.encode(text, true, true))),
        };
        let mut text = template.render_with(&messages, &render)?;
        let mut prompt = match prompt_of(&text, &images) {
            Ok(p) => p,
            Err(e) => {
                messages.pop();
                images.pop();
                writeln!(out, "[{e}]")?;
                continue;
            }
        };
        // Keep a quarter of the context for the answer: drop the oldest exchanges (never the
        // system message or the new question) until the conversation fits.
        let mut dropped = 0;
        while prompt.len() > opts.n_ctx * 3 / 4 {
            let first = messages.iter().position(|m| m.role != "system");
            match first {
                Some(i) if i + 1 < messages.len() => {
                    messages.remove(i);
                    images.remove(i);
                    dropped += 1;
                }
                _ => break,
            }
            text = template.render_with(&messages, &render)?;
            prompt = prompt_of(&text, &images)?;
        }
        if dropped > 0 {
            writeln!(
                out,
                "[dropped the {dropped} oldest messages to fit the context of {} tokens (-c)]",
                opts.n_ctx
            )?;
        }
        if prompt.len() >= opts.n_ctx {
            messages.pop();
            images.pop();
            writeln!(
                out,
                "[the message is {} tokens long with the conversation, more than the context of {} allows (-c)]",
                prompt.len(),
                opts.n_ctx
            )?;
            continue;
        }
        // Reuse the cached prefix; always feed at least one token to get fresh logits.
        let (logits, _) = session.feed_prompt(&prompt, prompt.len() - 1)?;
        let mut decoder = StreamDecoder::new();
        let mut answer = String::new();
        let mut write_failed = false;
        sampler.reset_grammar();
        if opts.reasoning_budget.is_some() && thinks(template.source(), &text) {
            // The budget starts inside a thought when this turn's prompt opens one.
            let mut params = opts.sampling.clone();
            let message = &opts.reasoning_budget_message;
            params.reasoning_budget = Some(budget_spec(tok, opts.reasoning_budget, message, &text));
            sampler = Sampler::new(params, vocab.clone());
        }
        session.generate(
            logits,
            &mut sampler,
            opts.n_predict,
            |id| tok.is_eog(id),
            |ev| {
                if ev.is_eog {
                    return true;
                }
                let piece = decoder.push(tok, ev.id);
                answer.push_str(&piece);
                if out
                    .write_all(piece.as_bytes())
                    .and_then(|_| out.flush())
                    .is_err()
                {
                    write_failed = true;
                    return false;
                }
                true
            },
        )?;
        let rest = decoder.flush();
        answer.push_str(&rest);
        if write_failed {
            return Ok(());
        }
        writeln!(out, "{rest}")?;
        messages.push(Message::new("assistant", answer));
        images.push(Vec::new());
    }
}
