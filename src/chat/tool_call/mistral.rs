//! Mistral's calls, after `[TOOL_CALLS]`: Mistral Nemo writes a JSON list,
//! `[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": "a1b2c3d4e"}]`; Devstral, Ministral and
//! Magistral write `[TOOL_CALLS]NAME[ARGS]{...}` for each call, and Mistral Small 3.2 puts
//! `[CALL_ID]ID` before `[ARGS]`. Ids are nine letters and digits. Either shape is read in
//! any of the three formats; each grammar writes its own.

use super::json_scan::{arguments, expect, value_at};
use super::{gbnf_literal, json_name_literal, repeated, until, Gbnf, Reply, ToolSpec};
use crate::chat::ToolCall;
use crate::sampling::grammar::json_schema::SchemaError;
use serde_json::Value;

const TOOL_CALLS: &str = "[TOOL_CALLS]";
const ARGS: &str = "[ARGS]";
const CALL_ID: &str = "[CALL_ID]";
/// The GBNF of a call id.
const ID: &str = "[a-zA-Z0-9]{9}";

pub const TRIGGERS: &[&str] = &[TOOL_CALLS];

/// The calls of a finished reply: each `[TOOL_CALLS]` and what follows it, until one that is
/// not well formed (which stays content, with the rest of the reply).
pub fn parse(text: &str) -> Reply {
    let Some(start) = text.find(TOOL_CALLS) else {
        return Reply::text(text);
    };
    let mut calls = Vec::new();
    let mut at = start;
    while let Some(after) = expect(text, at, TOOL_CALLS) {
        let Some((mut more, end)) = calls_at(text, after) else {
            break;
        };
        calls.append(&mut more);
        at = end;
    }
    let content = format!("{}{}", &text[..start], &text[at..]);
    Reply::calls_or_text(text, &content, calls)
}

/// The calls right after a `[TOOL_CALLS]` (ending at `at`): a JSON list (or one object), or
/// one `NAME[CALL_ID]ID[ARGS]{...}`; and the offset past them.
fn calls_at(text: &str, at: usize) -> Option<(Vec<ToolCall>, usize)> {
    if text[at..].trim_start().starts_with(['[', '{']) {
        let (v, end) = value_at(text, at)?;
        let calls = match v {
            Value::Array(items) => items.iter().map(json_call).collect::<Option<Vec<_>>>()?,
            one => vec![json_call(&one)?],
        };
        return (!calls.is_empty()).then_some((calls, end));
    }
    let (name, mut p) = until(text, at, &[ARGS, CALL_ID]);
    let name = name.trim();
    if !is_name(name) {
        return None;
    }
    let mut id = "";
    if text[p..].starts_with(CALL_ID) {
        let (i, q) = until(text, p + CALL_ID.len(), &[ARGS]);
        id = i.trim();
        p = q;
    }
    let p = expect(text, p, ARGS)?;
    let (v, end) = value_at(text, p)?;
    let args = arguments(Some(&v))?;
    Some((vec![ToolCall::function(id, name, args)], end))
}

/// `{"name", "arguments", "id"}` as a call.
fn json_call(v: &Value) -> Option<ToolCall> {
    let name = v.get("name")?.as_str()?;
    let args = arguments(v.get("arguments"))?;
    let id = v.get("id").and_then(Value::as_str).unwrap_or("");
    Some(ToolCall::function(id, name, args))
}

/// A function's name as the named shape writes it: no spaces or brackets.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Mistral Nemo's `[TOOL_CALLS][{...}, ...]` of `tools`, each with an id.
pub fn gbnf_nemo(tools: &[ToolSpec], parallel: bool) -> Result<String, SchemaError> {
    let mut g = Gbnf::default();
    g.tool_calls(tools, |t, args| {
        format!(
            "{} {} {} {args} {} {ID} {}",
            gbnf_literal("{\"name\": "),
            json_name_literal(&t.name),
            gbnf_literal(", \"arguments\": "),
            gbnf_literal(", \"id\": \""),
            gbnf_literal("\"}"),
        )
    })?;
    let calls = repeated("call", &gbnf_literal(", "), parallel);
    Ok(g.finish(&format!(
        "{} {calls} {}",
        gbnf_literal("[TOOL_CALLS]["),
        gbnf_literal("]")
    )))
}

/// `[TOOL_CALLS]NAME[ARGS]{...}` of `tools` (with `call_id`, `[CALL_ID]ID` before `[ARGS]`).
pub fn gbnf_args(tools: &[ToolSpec], parallel: bool, call_id: bool) -> Result<String, SchemaError> {
    let mut g = Gbnf::default();
    g.tool_calls(tools, |t, args| {
        let id = if call_id {
            format!("{} {ID} ", gbnf_literal(CALL_ID))
        } else {
            String::new()
        };
        format!(
            "{} {id}{} {args}",
            gbnf_literal(&format!("{TOOL_CALLS}{}", t.name)),
            gbnf_literal(ARGS)
        )
    })?;
    Ok(g.finish(&repeated("call", "", parallel)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tool_call::tests::check_grammar;
    use crate::chat::tool_call::Format;
    use serde_json::json;

    #[test]
    fn reads_nemo_lists() {
        let r = parse(
            r#"[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123XYZ"}]"#,
        );
        assert_eq!(r.content, "");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].id, "abc123XYZ");
        assert_eq!(r.tool_calls[0].function.name, "get_weather");
        assert_eq!(r.tool_calls[0].function.arguments, json!({"city": "Paris"}));
        let r = parse(
            r#"Let me look. [TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]"#,
        );
        assert_eq!(r.content, "Let me look.");
        let names: Vec<&str> = r
            .tool_calls
            .iter()
            .map(|c| c.function.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(r.tool_calls[0].id, "");
    }

    #[test]
    fn reads_named_calls() {
        let r = parse(
            "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]now[ARGS]{}",
        );
        assert_eq!(r.content, "Checking.");
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].function.arguments, json!({"city": "Paris"}));
        assert_eq!(r.tool_calls[1].function.name, "now");
        let r = parse("[TOOL_CALLS]get_weather[CALL_ID]abc123XYZ[ARGS]{\"city\": \"Oslo\"}");
        assert_eq!(r.tool_calls[0].id, "abc123XYZ");
        assert_eq!(r.tool_calls[0].function.arguments, json!({"city": "Oslo"}));
    }

    #[test]
    fn a_malformed_call_stays_text() {
        for text in [
            r#"[TOOL_CALLS][{"name": "a", "arguments": {"x": }]"#,
            r#"[TOOL_CALLS][{"arguments": {}}]"#,
            "[TOOL_CALLS]get weather[ARGS]{}",
            "[TOOL_CALLS]get_weather{\"city\": \"Paris\"}",
            "[TOOL_CALLS][]",
            "no calls here",
        ] {
            assert_eq!(parse(text), Reply::text(text), "{text}");
        }
        // A good call before a bad one is kept; the bad one is content.
        let r = parse("[TOOL_CALLS]now[ARGS]{}[TOOL_CALLS]oops");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.content, "[TOOL_CALLS]oops");
    }

    #[test]
    fn the_grammars_accept_calls_of_the_tools() {
        check_grammar(
            Format::MistralNemo,
            &[
                r#"[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123XYZ"}]"#,
                r#"[TOOL_CALLS][{"name": "now", "arguments": {}, "id": "000000000"}]"#,
            ],
            &[
                r#"[TOOL_CALLS][{"name": "send_mail", "arguments": {}, "id": "abc123XYZ"}]"#,
                r#"[TOOL_CALLS][{"name": "now", "arguments": {}, "id": "short"}]"#,
                r#"[TOOL_CALLS][{"name": "get_weather", "arguments": {}, "id": "abc123XYZ"}]"#,
            ],
            Some(
                r#"[TOOL_CALLS][{"name": "now", "arguments": {}, "id": "abc123XYZ"}, {"name": "now", "arguments": {}, "id": "abc123XY0"}]"#,
            ),
        );
        check_grammar(
            Format::Mistral,
            &[
                "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"days\": 2}",
                "[TOOL_CALLS]now[ARGS]{}",
            ],
            &[
                "[TOOL_CALLS]send_mail[ARGS]{}",
                "[TOOL_CALLS]get_weather[ARGS]{\"city\": 1}",
            ],
            Some("[TOOL_CALLS]now[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}"),
        );
        check_grammar(
            Format::MistralCallId,
            &["[TOOL_CALLS]get_weather[CALL_ID]abc123XYZ[ARGS]{\"city\": \"Paris\"}"],
            &[
                "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
                "[TOOL_CALLS]send_mail[CALL_ID]abc123XYZ[ARGS]{}",
            ],
            Some("[TOOL_CALLS]now[CALL_ID]abc123XYZ[ARGS]{}[TOOL_CALLS]now[CALL_ID]abc123XY0[ARGS]{}"),
        );
    }
}
