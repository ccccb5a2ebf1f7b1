//! Kimi K2's calls, in a section: `<|tool_calls_section_begin|>`, then for each call
//! `<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>`,
//! then `<|tool_calls_section_end|>`. The id `functions.NAME:IDX` is the call's id (the
//! template writes it back in the tool's answer).

use super::json_scan::{arguments, expect, value_at};
use super::{gbnf_literal, repeated, until, Gbnf, Reply, ToolSpec};
use crate::chat::ToolCall;
use crate::sampling::grammar::json_schema::SchemaError;

const SECTION_BEGIN: &str = "<|tool_calls_section_begin|>";
const SECTION_END: &str = "<|tool_calls_section_end|>";
const CALL_BEGIN: &str = "<|tool_call_begin|>";
const ARGUMENT_BEGIN: &str = "<|tool_call_argument_begin|>";
const CALL_END: &str = "<|tool_call_end|>";

pub const TRIGGERS: &[&str] = &[SECTION_BEGIN, CALL_BEGIN];

/// The calls of a finished reply; from a call that is not well formed on, the reply is
/// content.
pub fn parse(text: &str) -> Reply {
    let Some(start) = TRIGGERS.iter().filter_map(|t| text.find(t)).min() else {
        return Reply::text(text);
    };
    let mut at = expect(text, start, SECTION_BEGIN).unwrap_or(start);
    let mut calls = Vec::new();
    while let Some((call, end)) = call_at(text, at) {
        calls.push(call);
        at = end;
    }
    if !calls.is_empty() {
        at = expect(text, at, SECTION_END).unwrap_or(at);
    }
    let content = format!("{}{}", &text[..start], &text[at..]);
    Reply::calls_or_text(text, &content, calls)
}

/// The call that starts at `at` (after whitespace), and the offset past its end marker (or
/// past its JSON, where the reply ends there).
fn call_at(text: &str, at: usize) -> Option<(ToolCall, usize)> {
    let after = expect(text, at, CALL_BEGIN)?;
    let (id, arg) = until(text, after, &[ARGUMENT_BEGIN, CALL_END]);
    if !text[arg..].starts_with(ARGUMENT_BEGIN) {
        return None;
    }
    let id = id.trim();
    let name = id.strip_prefix("functions.").unwrap_or(id);
    let name = match name.rsplit_once(':') {
        Some((n, idx)) if idx.chars().all(|c| c.is_ascii_digit()) => n,
        _ => name,
    };
    if name.is_empty() || name.contains(['<', ' ', '{']) {
        return None;
    }
    let (v, end) = value_at(text, arg + ARGUMENT_BEGIN.len())?;
    let args = arguments(Some(&v))?;
    let end = match expect(text, end, CALL_END) {
        Some(e) => e,
        None if text[end..].trim().is_empty() => text.len(),
        None => return None,
    };
    Some((ToolCall::function(id, name, args), end))
}

/// A section of calls of `tools` (one, or with `parallel` several).
pub fn gbnf(tools: &[ToolSpec], parallel: bool) -> Result<String, SchemaError> {
    let mut g = Gbnf::default();
    g.tool_calls(tools, |t, args| {
        format!(
            "{} [0-9]{{1,4}} {} {args} {}",
            gbnf_literal(&format!("{CALL_BEGIN}functions.{}:", t.name)),
            gbnf_literal(ARGUMENT_BEGIN),
            gbnf_literal(CALL_END)
        )
    })?;
    Ok(g.finish(&format!(
        "{} {} {}",
        gbnf_literal(SECTION_BEGIN),
        repeated("call", "", parallel),
        gbnf_literal(SECTION_END)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tool_call::tests::check_grammar;
    use crate::chat::tool_call::Format;
    use serde_json::json;

    #[test]
    fn reads_a_section_of_calls() {
        let r = parse("Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.now:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>");
        assert_eq!(r.content, "Let me check.");
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].id, "functions.get_weather:0");
        assert_eq!(r.tool_calls[0].function.name, "get_weather");
        assert_eq!(r.tool_calls[0].function.arguments, json!({"city": "Paris"}));
        assert_eq!(r.tool_calls[1].id, "functions.now:1");
        assert_eq!(r.tool_calls[1].function.name, "now");
    }

    #[test]
    fn a_malformed_call_stays_text() {
        for text in [
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{\"x\": <|tool_call_end|><|tool_calls_section_end|>",
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0{}<|tool_call_end|><|tool_calls_section_end|>",
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.:0<|tool_call_argument_begin|>{}<|tool_call_end|>",
            "No calls.",
        ] {
            assert_eq!(parse(text), Reply::text(text), "{text}");
        }
    }

    #[test]
    fn the_grammar_accepts_calls_of_the_tools() {
        check_grammar(
            Format::KimiK2,
            &[
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_calls_section_end|>",
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.now:12<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
            ],
            &[
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.send_mail:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.now:x<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
            ],
            Some("<|tool_calls_section_begin|><|tool_call_begin|>functions.now:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_call_begin|>functions.now:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"),
        );
    }
}
