//! Hermes-style calls (Hermes 2 Pro and 3, Qwen 2.5 and its Coder models, Qwen 3, SmolLM3):
//! each call is a JSON object `{"name": ..., "arguments": {...}}` between `<tool_call>` and
//! `</tool_call>` lines, several in a row for parallel calls, after any text.

use super::json_scan::{arguments, expect, value_at};
use super::{call_grammar, gbnf_literal, repeated, Reply, ToolSpec};
use crate::chat::ToolCall;
use crate::sampling::grammar::json_schema::SchemaError;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

pub const TRIGGERS: &[&str] = &[OPEN];

/// The calls of a finished reply; a block that is not a well-formed call stays in the content.
pub fn parse(text: &str) -> Reply {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(OPEN) {
        let after = i + OPEN.len();
        match call_at(rest, after) {
            Some((call, end)) => {
                content.push_str(&rest[..i]);
                calls.push(call);
                rest = &rest[end..];
            }
            None => {
                content.push_str(&rest[..after]);
                rest = &rest[after..];
            }
        }
    }
    content.push_str(rest);
    if calls.is_empty() {
        return Reply::text(text);
    }
    Reply {
        content: content.trim().to_string(),
        tool_calls: calls,
    }
}

/// The call whose JSON starts at `at` (just past `<tool_call>`), and the offset past its
/// closing tag (or past the JSON when the reply ends there).
fn call_at(text: &str, at: usize) -> Option<(ToolCall, usize)> {
    let (v, end) = value_at(text, at)?;
    let name = v.get("name")?.as_str()?;
    let args = arguments(v.get("arguments").or_else(|| v.get("parameters")))?;
    let end = match expect(text, end, CLOSE) {
        Some(e) => e,
        None if text[end..].trim().is_empty() => text.len(),
        None => return None,
    };
    Some((ToolCall::function("", name, args), end))
}

/// A reply of one call (or, with `parallel`, several on their own lines) of one of `tools`.
pub fn gbnf(tools: &[ToolSpec], parallel: bool) -> Result<String, SchemaError> {
    let one = format!(
        "{} call {}",
        gbnf_literal("<tool_call>\n"),
        gbnf_literal("\n</tool_call>")
    );
    call_grammar(
        tools,
        "arguments",
        &repeated(&one, &gbnf_literal("\n"), parallel),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tool_call::tests::accepts;
    use serde_json::json;

    #[test]
    fn reads_calls_after_text() {
        let r = parse(
            "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
        );
        assert_eq!(r.content, "Let me check.");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].function.name, "get_weather");
        assert_eq!(r.tool_calls[0].function.arguments, json!({"city": "Paris"}));
    }

    #[test]
    fn reads_parallel_calls_and_quoted_arguments() {
        let r = parse(
            "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>",
        );
        let names: Vec<&str> = r
            .tool_calls
            .iter()
            .map(|c| c.function.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(r.tool_calls[1].function.arguments, json!({"x": 1}));
        assert_eq!(r.content, "");
    }

    #[test]
    fn a_malformed_call_stays_text() {
        for text in [
            "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": }\n</tool_call>",
            "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
            "<tool_call>\n{\"name\": \"a\"} trailing words\n</tool_call>",
            "plain answer",
        ] {
            let r = parse(text);
            assert!(r.tool_calls.is_empty(), "{text}");
            assert_eq!(r.content, text);
        }
        // A call the reply ends in without its closing tag still counts.
        let r = parse("<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n");
        assert_eq!(r.tool_calls.len(), 1);
    }

    #[test]
    fn the_grammar_accepts_exactly_calls_of_the_tools() {
        let tools = [
            ToolSpec {
                name: "get_weather".into(),
                parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
            },
            ToolSpec {
                name: "now".into(),
                parameters: json!({"type": "object", "properties": {}}),
            },
        ];
        let g = gbnf(&tools, false).unwrap();
        let ok = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        assert!(accepts(&g, ok));
        assert!(accepts(
            &g,
            "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"
        ));
        assert!(!accepts(
            &g,
            "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"
        ));
        assert!(!accepts(
            &g,
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"
        ));
        assert!(!accepts(&g, &format!("{ok}\n{ok}")));
        let parallel = gbnf(&tools, true).unwrap();
        assert!(accepts(&parallel, &format!("{ok}\n{ok}")));
        // What the grammar accepts, the parser reads.
        assert_eq!(parse(ok).tool_calls.len(), 1);
    }
}
