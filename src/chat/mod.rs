//! Chat: turning a conversation into the prompt text a model was trained on, with the Jinja
//! template stored in its GGUF (`tokenizer.chat_template`), and the interactive terminal
//! conversation of `--chat`.
//!
//! Owns message rendering and the terminal loop; tokenization stays in `tokenizer`, generation
//! in `engine::session`, and the HTTP side of chat in `server`.
//!
//! ```
//! use llamafile::chat::{ChatTemplate, Message};
//! let t = ChatTemplate::chatml();
//! let text = t.render(&[Message::new("user", "Hi")], true).unwrap();
//! assert_eq!(text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
//! ```

mod builtin;
mod caps;
mod gemma4;
pub mod isolate;
pub mod media;
mod message;
mod pyjson;
pub mod reasoning;
mod template;
mod terminal;
pub mod tool_call;

pub use builtin::{builtin, names as builtin_names};

pub use caps::TemplateCaps;
pub use message::{FunctionCall, Message, ToolCall};
pub use template::{ChatError, ChatTemplate, RenderOptions, CHATML, RENDER_FUEL};
pub use terminal::{run_chat, ChatOptions};

use crate::cli::Cli;
use crate::engine::loaded::Loaded;
use crate::engine::media::Media;

/// `--chat`: a terminal conversation on stdin/stdout; `system` (from `-p`/`-f`) opens it.
pub fn run_from_cli(
    cli: &Cli,
    loaded: &Loaded,
    system: Option<String>,
    n_ctx: usize,
    media: Option<&Media>,
) -> anyhow::Result<()> {
    let template = match template_override(cli, &loaded.tokenizer)? {
        Some(t) => t,
        None => ChatTemplate::from_gguf(&loaded.model.file, &loaded.tokenizer)?,
    };
    let opts = ChatOptions {
        system,
        sampling: cli.sampling_params(cli.resolved_seed())?,
        n_ctx,
        n_batch: cli.forward_batch(),
        n_predict: cli.n_predict,
        template_kwargs: cli.reasoning.template_kwargs(),
        reasoning_budget: cli.reasoning.budget(),
        reasoning_budget_message: cli.reasoning.reasoning_budget_message.clone(),
    };
    let stdin = std::io::stdin();
    run_chat(
        &loaded.model,
        &loaded.tokenizer,
        &template,
        &opts,
        &mut stdin.lock(),
        &mut std::io::stdout(),
        media,
    )
}

/// `-p TEXT --image FILE...` with a projector: one turn, as llama-mtmd-cli runs it.
pub fn run_media_turn(
    cli: &Cli,
    loaded: &Loaded,
    media: &Media,
    prompt: &str,
    n_ctx: usize,
) -> anyhow::Result<()> {
    let template = match template_override(cli, &loaded.tokenizer)? {
        Some(t) => t,
        None => ChatTemplate::from_gguf(&loaded.model.file, &loaded.tokenizer)?,
    };
    let params = cli.sampling_params(cli.resolved_seed())?;
    let opts = media::TurnOptions {
        prompt,
        system: cli.compat.system_prompt.as_deref(),
        images: &cli.media.image,
        template: &template,
        render: RenderOptions {
            add_generation_prompt: true,
            tools: None,
            kwargs: cli.reasoning.template_kwargs(),
        },
        n_ctx,
        n_batch: cli.forward_batch(),
        n_predict: cli.n_predict,
        sampler: media::sampler(loaded, params),
    };
    media::run_turn(loaded, media, opts)
}

/// The template `--chat-template` or `--chat-template-file` asks for, if either was given.
pub fn template_override(
    cli: &Cli,
    tok: &crate::tokenizer::Tokenizer,
) -> anyhow::Result<Option<ChatTemplate>> {
    use anyhow::Context;
    // Cli::settle keeps only the later of --chat-template and --chat-template-file.
    let (source, origin) = match (&cli.chat_template_file, &cli.chat_template) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read chat template file {}", path.display()))?;
            (text, format!("--chat-template-file {}", path.display()))
        }
        (None, Some(name)) => match builtin(name) {
            Some(src) => (src.to_string(), format!("--chat-template {name}")),
            None if name.contains("{{") || name.contains("{%") => {
                (name.clone(), "--chat-template".to_string())
            }
            None => anyhow::bail!(
                "--chat-template {name:?}: not a built-in format ({}) nor a Jinja template",
                builtin_names()
            ),
        },
        (None, None) => return Ok(None),
    };
    let template = ChatTemplate::for_tokenizer(&source, tok).with_context(|| origin.clone())?;
    Ok(Some(template))
}
