//! Functionary's calls. v3.1 (on Llama 3.1) writes `<function=NAME>{...}</function>` after any
//! text, and Python code after `<|python_tag|>`. v3.2 writes every part of a reply after a
//! recipient line, `>>>NAME\n{...}` for a call and `>>>all\ntext` for words; the prompt ends in
//! the first `>>>`, so a reply starts with its first recipient. Code for the `python` tool is
//! read as a call of `python` with `{"code": ...}`.

use super::json_scan::{arguments, expect, value_at};
use super::{gbnf_literal, repeated, until, Gbnf, Reply, ToolSpec};
use crate::chat::ToolCall;
use crate::sampling::grammar::json_schema::SchemaError;
use serde_json::json;

const FUNCTION: &str = "<function=";
const FUNCTION_END: &str = "</function>";
const PYTHON_TAG: &str = "<|python_tag|>";
/// What begins each part of a v3.2 reply after the first.
const RECIPIENT: &str = ">>>";

pub const TRIGGERS_V31: &[&str] = &[FUNCTION, PYTHON_TAG];

/// v3.1: the `<function=NAME>{...}</function>` calls of a finished reply (a malformed one
/// stays content), and code after `<|python_tag|>`.
pub fn parse_v31(text: &str) -> Reply {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = 0;
    while let Some((i, marker)) = [FUNCTION, PYTHON_TAG]
        .iter()
        .filter_map(|m| text[rest..].find(m).map(|i| (rest + i, *m)))
        .min()
    {
        let after = i + marker.len();
        if marker == PYTHON_TAG {
            let code = text[after..].trim();
            if !code.is_empty() {
                content.push_str(&text[rest..i]);
                calls.push(python(code));
                rest = text.len();
                break;
            }
        } else if let Some((call, end)) = function_at(text, after) {
            content.push_str(&text[rest..i]);
            calls.push(call);
            rest = end;
            continue;
        }
        content.push_str(&text[rest..after]);
        rest = after;
    }
    content.push_str(&text[rest..]);
    Reply::calls_or_text(text, &content, calls)
}

/// The call whose name starts at `at` (just past `<function=`), and the offset past its
/// `</function>` (or past its JSON, where the reply ends there).
fn function_at(text: &str, at: usize) -> Option<(ToolCall, usize)> {
    let (name, gt) = until(text, at, &[">"]);
    if !is_name(name) || gt == text.len() {
        return None;
    }
    let (v, end) = value_at(text, gt + 1)?;
    let args = arguments(Some(&v))?;
    let end = match expect(text, end, FUNCTION_END) {
        Some(e) => e,
        None if text[end..].trim().is_empty() => text.len(),
        None => return None,
    };
    Some((ToolCall::function("", name, args), end))
}

fn python(code: &str) -> ToolCall {
    ToolCall::function("", "python", json!({ "code": code }))
}

/// A recipient as Functionary writes it: `all` or a function's name.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// v3.2: each part of a finished reply by its recipient, `all` as content and any other as a
/// call; a part that is not a well-formed call stays content as written.
pub fn parse_v32(text: &str) -> Reply {
    let mut content = String::new();
    let mut calls = Vec::new();
    // The part now read: from `part` (its `>>>`, where written) to its recipient at `at`.
    let mut part = 0;
    let mut at = if text.starts_with(RECIPIENT) {
        RECIPIENT.len()
    } else {
        0
    };
    loop {
        let (recipient, nl) = until(text, at, &["\n"]);
        if nl == text.len() || !is_name(recipient) {
            content.push_str(&text[part..]);
            break;
        }
        let body_start = nl + 1;
        let body_end = next_part(text, body_start).unwrap_or(text.len());
        let body = &text[body_start..body_end];
        if recipient == "all" {
            content.push_str(body);
        } else {
            match v32_call(recipient, body) {
                Some(call) => calls.push(call),
                None => content.push_str(&text[part..body_end]),
            }
        }
        if body_end == text.len() {
            break;
        }
        part = body_end;
        at = body_end + RECIPIENT.len();
    }
    if calls.is_empty() {
        return Reply::text(&content);
    }
    Reply::calls_or_text(text, &content, calls)
}

/// Where the next part begins: a `>>>` followed by a recipient line.
fn next_part(text: &str, from: usize) -> Option<usize> {
    text[from..]
        .match_indices(RECIPIENT)
        .map(|(i, _)| from + i)
        .find(|&i| {
            let (line, nl) = until(text, i + RECIPIENT.len(), &["\n"]);
            nl < text.len() && is_name(line)
        })
}

/// The call of a part to `name`: its body is the JSON of the arguments (or code, for
/// `python`).
fn v32_call(name: &str, body: &str) -> Option<ToolCall> {
    if let Some((v, end)) = value_at(body, 0) {
        if body[end..].trim().is_empty() {
            return Some(ToolCall::function("", name, arguments(Some(&v))?));
        }
    }
    (name == "python" && !body.trim().is_empty()).then(|| python(body.trim()))
}

/// v3.1: `<function=NAME>{...}</function>` of one of `tools`, several in a row with
/// `parallel`.
pub fn gbnf_v31(tools: &[ToolSpec], parallel: bool) -> Result<String, SchemaError> {
    let mut g = Gbnf::default();
    g.tool_calls(tools, |t, args| {
        format!(
            "{} {args} {}",
            gbnf_literal(&format!("{FUNCTION}{}>", t.name)),
            gbnf_literal(FUNCTION_END)
        )
    })?;
    Ok(g.finish(&repeated("call", "", parallel)))
}

/// v3.2: `NAME\n{...}` of one of `tools` (the prompt wrote the `>>>`), then with `parallel`
/// more as `>>>NAME\n{...}`.
pub fn gbnf_v32(tools: &[ToolSpec], parallel: bool) -> Result<String, SchemaError> {
    let mut g = Gbnf::default();
    g.tool_calls(tools, |t, args| {
        format!("{} {args}", gbnf_literal(&format!("{}\n", t.name)))
    })?;
    Ok(g.finish(&repeated("call", &gbnf_literal(RECIPIENT), parallel)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tool_call::tests::check_grammar;
    use crate::chat::tool_call::Format;

    #[test]
    fn reads_v31_calls() {
        let r = parse_v31("Let me check.<function=get_weather>{\"city\": \"Paris\"}</function>");
        assert_eq!(r.content, "Let me check.");
        assert_eq!(r.tool_calls[0].function.name, "get_weather");
        assert_eq!(r.tool_calls[0].function.arguments, json!({"city": "Paris"}));
        let r = parse_v31("<function=a>{}</function>\n<function=b>{\"x\": 1}</function>");
        let names: Vec<&str> = r
            .tool_calls
            .iter()
            .map(|c| c.function.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(r.content, "");
        let r = parse_v31("<|python_tag|>print(1 + 1)");
        assert_eq!(r.tool_calls[0].function.name, "python");
        assert_eq!(
            r.tool_calls[0].function.arguments,
            json!({"code": "print(1 + 1)"})
        );
    }

    #[test]
    fn a_malformed_v31_call_stays_text() {
        for text in [
            "<function=a>{\"x\": }</function>",
            "<function=a b>{}</function>",
            "<function=a>{} trailing</function>",
            "<|python_tag|>",
            "plain",
        ] {
            assert_eq!(parse_v31(text), Reply::text(text), "{text}");
        }
    }

    #[test]
    fn reads_v32_parts() {
        let r = parse_v32("get_weather\n{\"city\": \"Paris\"}");
        assert_eq!(r.content, "");
        assert_eq!(r.tool_calls[0].function.arguments, json!({"city": "Paris"}));
        let r = parse_v32("all\nLet me check both.>>>get_weather\n{\"city\": \"Paris\"}>>>now\n{}");
        assert_eq!(r.content, "Let me check both.");
        let names: Vec<&str> = r
            .tool_calls
            .iter()
            .map(|c| c.function.name.as_str())
            .collect();
        assert_eq!(names, ["get_weather", "now"]);
        let r = parse_v32("python\nimport math\nprint(math.pi)");
        assert_eq!(
            r.tool_calls[0].function.arguments,
            json!({"code": "import math\nprint(math.pi)"})
        );
        // Words alone: the recipient line is not content; a Python prompt is not a part.
        assert_eq!(parse_v32("all\nHello!"), Reply::text("Hello!"));
        assert_eq!(
            parse_v32("all\nType >>> print(1) in the REPL."),
            Reply::text("Type >>> print(1) in the REPL.")
        );
    }

    #[test]
    fn a_malformed_v32_call_stays_text() {
        for text in ["get_weather\n{\"city\": ", "Hello there", "get_weather {}"] {
            assert_eq!(parse_v32(text), Reply::text(text), "{text}");
        }
        let r = parse_v32("now\n{}>>>get_weather\nnot json");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.content, ">>>get_weather\nnot json");
    }

    #[test]
    fn the_grammars_accept_calls_of_the_tools() {
        check_grammar(
            Format::FunctionaryV31,
            &[
                "<function=get_weather>{\"city\": \"Paris\"}</function>",
                "<function=now>{}</function>",
            ],
            &[
                "<function=send_mail>{}</function>",
                "<function=get_weather>{}</function>",
            ],
            Some("<function=now>{}</function><function=now>{}</function>"),
        );
        check_grammar(
            Format::FunctionaryV32,
            &["get_weather\n{\"city\": \"Paris\", \"days\": 1}", "now\n{}"],
            &["send_mail\n{}", "all\nHello", "get_weather\n{\"days\": 1}"],
            Some("now\n{}>>>get_weather\n{\"city\": \"Paris\"}"),
        );
    }
}
