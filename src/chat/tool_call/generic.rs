//! llama.cpp's generic format, for templates that teach no format of their own: the whole reply
//! is one JSON object, `{"tool_call": {"name", "arguments"}}`, `{"tool_calls": [...]}` for
//! parallel calls, or `{"response": "..."}` for an answer in words.

use super::json_scan::{arguments, value_at};
use super::{call_grammar, gbnf_literal, Reply, ToolSpec};
use crate::chat::ToolCall;
use crate::sampling::grammar::json_schema::SchemaError;
use serde_json::Value;

/// The calls (or the response) of a finished reply that is one JSON object; any other reply is
/// content as written.
pub fn parse(text: &str) -> Reply {
    let Some((v, end)) = value_at(text, 0) else {
        return Reply::text(text);
    };
    if !text[end..].trim().is_empty() {
        return Reply::text(text);
    }
    let call = |c: &Value| -> Option<ToolCall> {
        let name = c.get("name")?.as_str()?;
        let args = arguments(c.get("arguments"))?;
        let id = c.get("id").and_then(Value::as_str).unwrap_or("");
        Some(ToolCall::function(id, name, args))
    };
    if let Some(c) = v.get("tool_call") {
        if let Some(c) = call(c) {
            return Reply {
                content: String::new(),
                tool_calls: vec![c],
            };
        }
    } else if let Some(Value::Array(cs)) = v.get("tool_calls") {
        let calls: Option<Vec<ToolCall>> = cs.iter().map(call).collect();
        if let Some(calls) = calls {
            return Reply {
                content: String::new(),
                tool_calls: calls,
            };
        }
    } else if let Some(Value::String(r)) = v.get("response") {
        return Reply::text(r);
    }
    Reply::text(text)
}

/// A reply that is `{"tool_call": ...}` (with `parallel`, `{"tool_calls": [...]}`) of `tools`.
pub fn gbnf(tools: &[ToolSpec], parallel: bool) -> Result<String, SchemaError> {
    let root = if parallel {
        format!(
            "{} call ( {} call )* {}",
            gbnf_literal("{\"tool_calls\": ["),
            gbnf_literal(", "),
            gbnf_literal("]}")
        )
    } else {
        format!(
            "{} call {}",
            gbnf_literal("{\"tool_call\": "),
            gbnf_literal("}")
        )
    };
    call_grammar(tools, "arguments", &root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tool_call::tests::accepts;
    use serde_json::json;

    #[test]
    fn reads_the_three_shapes() {
        let r = parse(r#"{"tool_call": {"name": "f", "arguments": {"a": 1}}}"#);
        assert_eq!(r.tool_calls[0].function.name, "f");
        assert_eq!(r.tool_calls[0].function.arguments, json!({"a": 1}));
        let r = parse(
            r#" {"tool_calls": [{"name": "f", "arguments": {}}, {"name": "g", "arguments": {}}]} "#,
        );
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(parse(r#"{"response": "Hello"}"#), Reply::text("Hello"));
        for text in [
            "Hello",
            r#"{"tool_call": {"arguments": {}}}"#,
            r#"{"x": 1} more"#,
        ] {
            assert_eq!(parse(text), Reply::text(text), "{text}");
        }
    }

    #[test]
    fn the_grammar_accepts_calls_of_the_tools() {
        let tools = [ToolSpec {
            name: "f".into(),
            parameters: json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}),
        }];
        let one = gbnf(&tools, false).unwrap();
        assert!(accepts(
            &one,
            r#"{"tool_call": {"name": "f", "arguments": {"a": 1}}}"#
        ));
        assert!(!accepts(
            &one,
            r#"{"tool_call": {"name": "g", "arguments": {"a": 1}}}"#
        ));
        let many = gbnf(&tools, true).unwrap();
        let two = r#"{"tool_calls": [{"name": "f", "arguments": {"a": 1}}, {"name": "f", "arguments": {"a": 2}}]}"#;
        assert!(accepts(&many, two));
        assert_eq!(parse(two).tool_calls.len(), 2);
    }
}
