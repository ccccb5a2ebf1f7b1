//! DeepSeek's calls, between `<｜tool▁calls▁begin｜>` and `<｜tool▁calls▁end｜>`, each between
//! `<｜tool▁call▁begin｜>` and `<｜tool▁call▁end｜>`: R1 (and its distills) writes
//! `function<｜tool▁sep｜>NAME\n```json\n{...}\n```` in each, V3.1 `NAME<｜tool▁sep｜>{...}`.
//! Either shape is read in both formats, with the misspellings of the opening marker that
//! distills are known to write; each grammar writes its own.

use super::json_scan::{arguments, expect, value_at};
use super::{gbnf_literal, repeated, until, Gbnf, Reply, ToolSpec};
use crate::chat::ToolCall;
use crate::sampling::grammar::json_schema::SchemaError;

pub const CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
const CALLS_END: &str = "<｜tool▁calls▁end｜>";
const CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const CALL_END: &str = "<｜tool▁call▁end｜>";
const SEP: &str = "<｜tool▁sep｜>";

/// Where calls begin: the marker, its misspellings, or a call with no list marker before it.
pub const TRIGGERS: &[&str] = &[
    CALLS_BEGIN,
    "<｜tool_calls_begin｜>",
    "<｜tool calls begin｜>",
    "<｜tool\\_calls\\_begin｜>",
    "<｜tool▁calls｜>",
    CALL_BEGIN,
];

/// The calls of a finished reply; from a call that is not well formed on, the reply is
/// content.
pub fn parse(text: &str) -> Reply {
    let Some((start, marker)) = TRIGGERS
        .iter()
        .filter_map(|t| text.find(t).map(|i| (i, *t)))
        .min()
    else {
        return Reply::text(text);
    };
    let mut at = if marker == CALL_BEGIN {
        start
    } else {
        start + marker.len()
    };
    let mut calls = Vec::new();
    while let Some((call, end)) = call_at(text, at) {
        calls.push(call);
        at = end;
    }
    if !calls.is_empty() {
        at = expect(text, at, CALLS_END).unwrap_or(at);
    }
    let content = format!("{}{}", &text[..start], &text[at..]);
    Reply::calls_or_text(text, &content, calls)
}

/// The call that starts at `at` (after whitespace) with `<｜tool▁call▁begin｜>`, and the
/// offset past its end marker (or past its JSON, where the reply ends there).
fn call_at(text: &str, at: usize) -> Option<(ToolCall, usize)> {
    let after = expect(text, at, CALL_BEGIN)?;
    let (head, sep) = until(text, after, &[SEP, CALL_END]);
    if !text[sep..].starts_with(SEP) {
        return None;
    }
    let mut p = sep + SEP.len();
    let name = if text[p..].trim_start().starts_with('{') {
        // V3.1: the name came before the separator.
        head.trim()
    } else {
        // R1: the type came first ("function"), the name is the rest of the line.
        let (line, end) = until(text, p, &["\n", "```"]);
        p = end;
        p = expect(text, p, "```json")
            .or_else(|| expect(text, p, "```"))
            .unwrap_or(p);
        line.trim()
    };
    if name.is_empty() || name.contains(['<', '>', '{', ' ']) {
        return None;
    }
    let (v, mut end) = value_at(text, p)?;
    let args = arguments(Some(&v))?;
    end = expect(text, end, "```").unwrap_or(end);
    let end = match expect(text, end, CALL_END) {
        Some(e) => e,
        None if text[end..].trim().is_empty() => text.len(),
        None => return None,
    };
    Some((ToolCall::function("", name, args), end))
}

/// R1's list of calls of `tools`, one a line.
pub fn gbnf_r1(tools: &[ToolSpec], parallel: bool) -> Result<String, SchemaError> {
    let mut g = Gbnf::default();
    g.tool_calls(tools, |t, args| {
        format!(
            "{} {args} {}",
            gbnf_literal(&format!("{CALL_BEGIN}function{SEP}{}\n```json\n", t.name)),
            gbnf_literal(&format!("\n```{CALL_END}"))
        )
    })?;
    Ok(g.finish(&list(&repeated("call", &gbnf_literal("\n"), parallel))))
}

/// V3.1's list of calls of `tools`.
pub fn gbnf_v31(tools: &[ToolSpec], parallel: bool) -> Result<String, SchemaError> {
    let mut g = Gbnf::default();
    g.tool_calls(tools, |t, args| {
        format!(
            "{} {args} {}",
            gbnf_literal(&format!("{CALL_BEGIN}{}{SEP}", t.name)),
            gbnf_literal(CALL_END)
        )
    })?;
    Ok(g.finish(&list(&repeated("call", "", parallel))))
}

fn list(calls: &str) -> String {
    format!(
        "{} {calls} {}",
        gbnf_literal(CALLS_BEGIN),
        gbnf_literal(CALLS_END)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tool_call::tests::check_grammar;
    use crate::chat::tool_call::Format;
    use serde_json::json;

    const R1_ONE: &str = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";

    #[test]
    fn reads_r1_calls() {
        let r = parse(&format!(
            "<think>\nThe user wants weather.\n</think>\n\n{R1_ONE}"
        ));
        assert_eq!(r.content, "<think>\nThe user wants weather.\n</think>");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].function.name, "get_weather");
        assert_eq!(r.tool_calls[0].function.arguments, json!({"city": "Paris"}));
        let two = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n```json\n{}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>b\n```json\n{\"x\": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
        let r = parse(two);
        let names: Vec<&str> = r
            .tool_calls
            .iter()
            .map(|c| c.function.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
        // A distill's misspelt marker, and no fence around the JSON.
        let r = parse("<｜tool calls begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n{\"x\": 2}<｜tool▁call▁end｜>");
        assert_eq!(r.tool_calls[0].function.arguments, json!({"x": 2}));
    }

    #[test]
    fn reads_v31_calls() {
        let r = parse("Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>now<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
        assert_eq!(r.content, "Sure.");
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].function.arguments, json!({"city": "Paris"}));
        assert_eq!(r.tool_calls[1].function.name, "now");
    }

    #[test]
    fn a_malformed_call_stays_text() {
        for text in [
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>a\n```json\n{\"x\": \n```<｜tool▁call▁end｜>",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a{\"x\": 1}<｜tool▁call▁end｜>",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>{} and more<｜tool▁call▁end｜>",
            "just words",
        ] {
            assert_eq!(parse(text), Reply::text(text), "{text}");
        }
    }

    #[test]
    fn the_grammars_accept_calls_of_the_tools() {
        check_grammar(
            Format::DeepSeekR1,
            &[
                R1_ONE,
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            ],
            &[
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>send_mail\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
                "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            ],
            Some("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
        );
        check_grammar(
            Format::DeepSeekV31,
            &["<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"],
            &["<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>send_mail<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"],
            Some("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>now<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
        );
    }
}
