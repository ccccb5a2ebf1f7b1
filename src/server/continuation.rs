//! How a chat prompt ends, as llama-server decides it: with the template's generation prompt
//! (`add_generation_prompt`, true unless a request says otherwise), or continuing the last
//! assistant message (`continue_final_message`, or by default when the conversation ends with
//! an assistant turn: `--prefill-assistant`). A continued message is rendered as llama.cpp does
//! it: the turns before it, the template's generation prompt (what `add_generation_prompt`
//! adds to them), then the message's text, with no end-of-turn after it.

use super::error::ApiError;
use super::json::{kind, Obj};
use crate::chat::{ChatTemplate, Message, RenderOptions};
use serde_json::Value;

/// How a conversation's prompt ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The template's own ending, with its generation prompt or without.
    Template { generation_prompt: bool },
    /// The last message continued.
    Continue,
}

/// Reads `add_generation_prompt` and `continue_final_message` of request `o` for `messages`;
/// `prefill` is `--prefill-assistant`. The refusals are llama-server's, word for word.
pub fn ending(o: &Obj, messages: &[Message], prefill: bool) -> Result<Ending, ApiError> {
    let mut generation_prompt = o.bool("add_generation_prompt")?.unwrap_or(true);
    let mut continued =
        match o.get("continue_final_message") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Bool(true)) => true,
            Some(Value::String(s)) if s == "content" => true,
            Some(Value::String(s)) if s == "reasoning_content" => return Err(ApiError::field(
                "continue_final_message",
                "continuing a message's reasoning_content is not supported; continue its content",
            )),
            Some(other) => {
                return Err(ApiError::field(
                    "continue_final_message",
                    format!("expected true, false or \"content\", got {}", kind(other)),
                ))
            }
        };
    let last_is_assistant = messages.last().is_some_and(|m| m.role == "assistant");
    if !continued && prefill && last_is_assistant {
        if messages.len() >= 2 && messages[messages.len() - 2].role == "assistant" {
            return Err(ApiError::field(
                "messages",
                "Cannot have 2 or more assistant messages at the end of the list.",
            ));
        }
        continued = true;
        generation_prompt = false;
    }
    if !continued {
        return Ok(Ending::Template { generation_prompt });
    }
    if generation_prompt {
        return Err(ApiError::field(
            "continue_final_message",
            "Cannot set both add_generation_prompt and continue_final_message to true.",
        ));
    }
    if last_is_assistant && messages.last().is_some_and(|m| !m.tool_calls.is_empty()) {
        return Err(ApiError::field(
            "continue_final_message",
            "Cannot continue an assistant message that contains tool calls.",
        ));
    }
    Ok(Ending::Continue)
}

/// The prompt of `messages` ending as `ending` says, rendered with `template` and `options`
/// (whose `add_generation_prompt` is set here).
pub fn render(
    template: &ChatTemplate,
    messages: &[Message],
    options: &RenderOptions,
    ending: Ending,
) -> Result<String, ApiError> {
    let render = |msgs: &[Message], generation_prompt: bool| {
        let mut o = options.clone();
        o.add_generation_prompt = generation_prompt;
        template
            .render_with(msgs, &o)
            .map_err(|e| ApiError::field("messages", e))
    };
    match ending {
        Ending::Template { generation_prompt } => render(messages, generation_prompt),
        Ending::Continue => {
            let Some((last, before)) = messages.split_last() else {
                return render(messages, false);
            };
            let closed = render(before, false)?;
            let opened = render(before, true)?;
            let shared = common_prefix(&closed, &opened);
            let mut text = closed;
            text.push_str(&opened[shared..]);
            text.push_str(&last.content);
            Ok(text)
        }
    }
}

/// The text the template adds to open the assistant's turn after `messages` (llama-server's
/// `generation_prompt`): what rendering them with the generation prompt adds to rendering them
/// without. `opened`: the rendering with it, when already made.
pub fn opening(
    template: &ChatTemplate,
    messages: &[Message],
    options: &RenderOptions,
    opened: Option<&str>,
) -> Result<String, ApiError> {
    let render = |generation_prompt: bool| {
        let mut o = options.clone();
        o.add_generation_prompt = generation_prompt;
        template
            .render_with(messages, &o)
            .map_err(|e| ApiError::field("messages", e))
    };
    let closed = render(false)?;
    let opened = match opened {
        Some(text) => text.to_string(),
        None => render(true)?,
    };
    Ok(opened[common_prefix(&closed, &opened)..].to_string())
}

/// The length in bytes of the longest common prefix of `a` and `b`, at a character boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, x), y)| x != y)
        .map_or(a.len().min(b.len()), |((i, _), _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conv(roles: &[&str]) -> Vec<Message> {
        roles.iter().map(|r| Message::new(*r, "x")).collect()
    }

    fn end(body: Value, roles: &[&str], prefill: bool) -> Result<Ending, String> {
        ending(&Obj::root(&body), &conv(roles), prefill).map_err(|e| e.message)
    }

    #[test]
    fn endings_as_llama_server_decides_them() {
        let open = Ending::Template {
            generation_prompt: true,
        };
        assert_eq!(end(json!({}), &["user"], true), Ok(open));
        assert_eq!(end(json!({}), &["user", "assistant"], false), Ok(open));
        assert_eq!(
            end(json!({}), &["user", "assistant"], true),
            Ok(Ending::Continue)
        );
        assert_eq!(
            end(json!({"add_generation_prompt": false}), &["user"], true),
            Ok(Ending::Template {
                generation_prompt: false
            })
        );
        assert_eq!(
            end(
                json!({"continue_final_message": true, "add_generation_prompt": false}),
                &["user", "assistant"],
                false
            ),
            Ok(Ending::Continue)
        );
        let both = end(
            json!({"continue_final_message": true}),
            &["user", "assistant"],
            true,
        );
        assert!(both.unwrap_err().contains("Cannot set both"));
        let two = end(json!({}), &["user", "assistant", "assistant"], true);
        assert!(two.unwrap_err().contains("2 or more assistant"));
        assert!(end(json!({"continue_final_message": 3}), &["user"], true).is_err());
    }

    #[test]
    fn common_prefixes_stop_at_characters() {
        assert_eq!(common_prefix("abc", "abd"), 2);
        assert_eq!(common_prefix("ab", "abc"), 2);
        assert_eq!(common_prefix("é", "è"), 0);
        assert_eq!(common_prefix("", "x"), 0);
    }
}
