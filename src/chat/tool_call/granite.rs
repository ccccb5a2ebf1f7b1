//! Granite 3's calls: a JSON list after `<|tool_call|>`,
//! `<|tool_call|>[{"name": ..., "arguments": {...}}, ...]`, after any text. (Granite 4 writes
//! Hermes's `<tool_call>`.)

use super::json_scan::{arguments, value_at};
use super::{call_grammar, gbnf_literal, repeated, Reply, ToolSpec};
use crate::chat::ToolCall;
use crate::sampling::grammar::json_schema::SchemaError;
use serde_json::Value;

const TOOL_CALL: &str = "<|tool_call|>";

pub const TRIGGERS: &[&str] = &[TOOL_CALL];

/// The calls of a finished reply; a list that is not well formed leaves the reply as content.
pub fn parse(text: &str) -> Reply {
    let Some(i) = text.find(TOOL_CALL) else {
        return Reply::text(text);
    };
    let Some((v, end)) = value_at(text, i + TOOL_CALL.len()) else {
        return Reply::text(text);
    };
    let call = |c: &Value| -> Option<ToolCall> {
        let name = c.get("name")?.as_str()?;
        Some(ToolCall::function("", name, arguments(c.get("arguments"))?))
    };
    let calls = match &v {
        Value::Array(items) => items.iter().map(call).collect::<Option<Vec<_>>>(),
        one => call(one).map(|c| vec![c]),
    };
    match calls {
        Some(calls) => {
            let content = format!("{}{}", &text[..i], &text[end..]);
            Reply::calls_or_text(text, &content, calls)
        }
        None => Reply::text(text),
    }
}

/// `<|tool_call|>[...]` of one call of `tools` (with `parallel`, one or more).
pub fn gbnf(tools: &[ToolSpec], parallel: bool) -> Result<String, SchemaError> {
    let root = format!(
        "{} {} {}",
        gbnf_literal("<|tool_call|>["),
        repeated("call", &gbnf_literal(", "), parallel),
        gbnf_literal("]")
    );
    call_grammar(tools, "arguments", &root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tool_call::tests::check_grammar;
    use crate::chat::tool_call::Format;
    use serde_json::json;

    #[test]
    fn reads_calls() {
        let r = parse(
            "Checking.<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"now\", \"arguments\": {}}]",
        );
        assert_eq!(r.content, "Checking.");
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].function.arguments, json!({"city": "Paris"}));
        assert_eq!(r.tool_calls[1].function.name, "now");
        let r = parse("<|tool_call|>{\"name\": \"now\", \"arguments\": {}}");
        assert_eq!(r.tool_calls.len(), 1);
    }

    #[test]
    fn a_malformed_call_stays_text() {
        for text in [
            "<|tool_call|>[{\"name\": \"a\", \"arguments\": {\"x\": }]",
            "<|tool_call|>[{\"arguments\": {}}]",
            "<|tool_call|>[]",
            "<|tool_call|>get_weather",
            "Just words.",
        ] {
            assert_eq!(parse(text), Reply::text(text), "{text}");
        }
    }

    #[test]
    fn the_grammar_accepts_calls_of_the_tools() {
        check_grammar(
            Format::Granite,
            &[
                "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
                "<|tool_call|>[{\"name\": \"now\", \"arguments\": {}}]",
            ],
            &[
                "<|tool_call|>[{\"name\": \"send_mail\", \"arguments\": {}}]",
                "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {}}]",
            ],
            Some("<|tool_call|>[{\"name\": \"now\", \"arguments\": {}}, {\"name\": \"now\", \"arguments\": {}}]"),
        );
    }
}
