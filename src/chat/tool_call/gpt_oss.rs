//! GPT-OSS's harmony format: a reply is messages, each `<|channel|>CHANNEL<|message|>TEXT`
//! ended by `<|end|>` (or `<|call|>`, `<|return|>`), the next one after
//! `<|start|>assistant` (the prompt wrote the first one's). A call is a message to
//! `functions.NAME`, the recipient written in the channel (`<|channel|>commentary
//! to=functions.NAME <|constrain|>json<|message|>{...}`) or after the role (`<|start|>assistant
//! to=functions.NAME<|channel|>commentary json<|message|>{...}`). The final channel and the
//! commentary without a recipient are the content; the analysis channel (the model's thinking)
//! is left out.

use super::json_scan::{arguments, value_at};
use super::{gbnf_literal, Gbnf, Reply, ToolSpec};
use crate::chat::ToolCall;
use crate::sampling::grammar::json_schema::SchemaError;

const START: &str = "<|start|>";
const CHANNEL: &str = "<|channel|>";
const MESSAGE: &str = "<|message|>";
const END: &str = "<|end|>";
const ENDS: &[&str] = &[END, "<|call|>", "<|return|>"];

/// The calls and the final text of a finished reply; a reply without channels is content as
/// written, and a call that is not well formed stays in the content as written.
pub fn parse(text: &str) -> Reply {
    if !text.contains(CHANNEL) {
        return Reply::text(text);
    }
    let mut content: Vec<&str> = Vec::new();
    let mut calls = Vec::new();
    let mut from = 0;
    while from < text.len() {
        let skip = if text[from..].starts_with(START) {
            START.len()
        } else {
            0
        };
        let next = text[from + skip..]
            .find(START)
            .map_or(text.len(), |i| from + skip + i);
        let raw = &text[from..next];
        let msg = raw.strip_prefix(START).unwrap_or(raw);
        let msg = msg.strip_prefix("assistant").unwrap_or(msg);
        from = next;
        let Some((header, rest)) = msg.split_once(MESSAGE) else {
            if !msg.trim().is_empty() {
                content.push(raw);
            }
            continue;
        };
        let end = ENDS.iter().filter_map(|e| rest.find(e)).min();
        let body = &rest[..end.unwrap_or(rest.len())];
        match recipient(header) {
            Some(to) => match to.strip_prefix("functions.").and_then(|n| call(n, body)) {
                Some(c) => calls.push(c),
                None => content.push(raw),
            },
            None => {
                if matches!(channel(header), "final" | "commentary") {
                    content.push(body);
                }
            }
        }
    }
    Reply {
        content: content.join("\n").trim().to_string(),
        tool_calls: calls,
    }
}

/// The channel a message header names.
fn channel(header: &str) -> &str {
    header.split_once(CHANNEL).map_or("", |(_, c)| word(c))
}

/// The recipient a message header names (`to=...`), in the role or the channel part.
fn recipient(header: &str) -> Option<&str> {
    let (_, to) = header.split_once("to=")?;
    Some(word(to)).filter(|w| !w.is_empty())
}

/// The text up to a space or a marker.
fn word(s: &str) -> &str {
    let end = s.find([' ', '<', '\n']).unwrap_or(s.len());
    &s[..end]
}

/// A call of `name` whose message is `body`, the JSON of its arguments.
fn call(name: &str, body: &str) -> Option<ToolCall> {
    let (v, end) = value_at(body, 0)?;
    if !body[end..].trim().is_empty() || name.is_empty() {
        return None;
    }
    Some(ToolCall::function("", name, arguments(Some(&v))?))
}

/// A reply that ends in a call of one of `tools`, after any messages of analysis or
/// commentary (the model's `<|call|>` ends the turn, so one call).
pub fn gbnf(tools: &[ToolSpec]) -> Result<String, SchemaError> {
    let mut g = Gbnf::default();
    g.tool_calls(tools, |t, args| {
        format!(
            "{} {args}",
            gbnf_literal(&format!(
                "{CHANNEL}commentary to=functions.{} <|constrain|>json{MESSAGE}",
                t.name
            ))
        )
    })?;
    g.text_without("message-text", END);
    g.rule(
        "message",
        &format!(
            "{} ( \"analysis\" | \"commentary\" ) {} message-text {}",
            gbnf_literal(CHANNEL),
            gbnf_literal(MESSAGE),
            gbnf_literal(END)
        ),
    );
    Ok(g.finish(&format!(
        "( message {} )* call",
        gbnf_literal(&format!("{START}assistant"))
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tool_call::tests::check_grammar;
    use crate::chat::tool_call::Format;
    use serde_json::json;

    #[test]
    fn reads_a_call_after_analysis() {
        let r = parse("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>");
        assert_eq!(r.content, "");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].function.name, "get_weather");
        assert_eq!(r.tool_calls[0].function.arguments, json!({"city": "Paris"}));
        // The recipient after the role, as the template writes it.
        let r = parse(" to=functions.now<|channel|>commentary json<|message|>{}");
        assert_eq!(r.tool_calls[0].function.name, "now");
    }

    #[test]
    fn the_final_channel_is_the_content() {
        let r = parse("<|channel|>analysis<|message|>Say hi.<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>");
        assert_eq!(r, Reply::text("Hello!"));
        let r = parse("<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.now <|constrain|>json<|message|>{}");
        assert_eq!(r.content, "Checking.");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(parse("Plain words."), Reply::text("Plain words."));
    }

    #[test]
    fn a_malformed_call_stays_text() {
        let bad = "<|start|>assistant<|channel|>commentary to=functions.now <|constrain|>json<|message|>{\"x\": <|call|>";
        let r = parse(&format!("<|channel|>final<|message|>Hi.<|end|>{bad}"));
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.content, format!("Hi.\n{bad}"));
        let r = parse("<|channel|>commentary to=browser.search<|message|>{\"q\": 1}");
        assert!(r.tool_calls.is_empty());
    }

    #[test]
    fn the_grammar_accepts_calls_of_the_tools() {
        check_grammar(
            Format::GptOss,
            &[
                "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}",
                "<|channel|>analysis<|message|>Time, then.<|end|><|start|>assistant<|channel|>commentary to=functions.now <|constrain|>json<|message|>{}",
            ],
            &[
                "<|channel|>commentary to=functions.send_mail <|constrain|>json<|message|>{}",
                "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}",
                "<|channel|>final<|message|>Hello",
            ],
            None,
        );
    }
}
