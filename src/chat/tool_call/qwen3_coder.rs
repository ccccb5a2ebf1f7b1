//! Qwen3-Coder's calls (also Qwen 3.5's and Nemotron Nano 3's):
//! `<tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>`,
//! after any text. A string value is written as is, any other as JSON, so reading a value needs
//! the tool's schema (see `xml_args`). A `<function=` block without `<tool_call>` around it, as
//! the model sometimes writes, is read too.

use super::json_scan::expect;
use super::xml_args::{param_schema, params_gbnf, value};
use super::{gbnf_literal, repeated, until, Gbnf, Reply, ToolSpec};
use crate::chat::ToolCall;
use crate::sampling::grammar::json_schema::SchemaError;
use serde_json::{Map, Value};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const FUNCTION: &str = "<function=";
const FUNCTION_END: &str = "</function>";
const PARAMETER: &str = "<parameter=";
const PARAMETER_END: &str = "</parameter>";

pub const TRIGGERS: &[&str] = &[OPEN, FUNCTION];

/// The calls of a finished reply, their values read by the schemas of `tools`; a block that is
/// not a well-formed call stays in the content.
pub fn parse(text: &str, tools: &[ToolSpec]) -> Reply {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = 0;
    while let Some((i, marker)) = TRIGGERS
        .iter()
        .filter_map(|m| text[rest..].find(m).map(|i| (rest + i, *m)))
        .min()
    {
        match call_at(text, i, tools) {
            Some((call, end)) => {
                content.push_str(&text[rest..i]);
                calls.push(call);
                rest = end;
            }
            None => {
                let after = i + marker.len();
                content.push_str(&text[rest..after]);
                rest = after;
            }
        }
    }
    content.push_str(&text[rest..]);
    Reply::calls_or_text(text, &content, calls)
}

/// The call at `at` (its `<tool_call>` or `<function=`), and the offset past its end (or past
/// `</function>`, where the reply ends there).
fn call_at(text: &str, at: usize, tools: &[ToolSpec]) -> Option<(ToolCall, usize)> {
    let wrapped = text[at..].starts_with(OPEN);
    let p = if wrapped { at + OPEN.len() } else { at };
    let p = expect(text, p, FUNCTION)?;
    let (name, gt) = until(text, p, &[">", "\n"]);
    if !is_name(name) || !text[gt..].starts_with('>') {
        return None;
    }
    let mut p = gt + 1;
    let mut args = Map::new();
    while let Some(q) = expect(text, p, PARAMETER) {
        let (key, gt) = until(text, q, &[">", "\n"]);
        if !is_name(key) || !text[gt..].starts_with('>') {
            return None;
        }
        let (raw, end) = until(text, gt + 1, &[PARAMETER_END]);
        if end == text.len() {
            return None;
        }
        // The template puts the value on lines of its own.
        let raw = raw.strip_prefix('\n').unwrap_or(raw);
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        args.insert(key.to_string(), value(raw, param_schema(tools, name, key)));
        p = end + PARAMETER_END.len();
    }
    let mut end = expect(text, p, FUNCTION_END)?;
    if wrapped {
        end = match expect(text, end, CLOSE) {
            Some(e) => e,
            None if text[end..].trim().is_empty() => text.len(),
            None => return None,
        };
    }
    Some((ToolCall::function("", name, Value::Object(args)), end))
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && !s.contains(|c: char| c.is_whitespace() || "<>{}\"=".contains(c))
}

/// One call of `tools` (with `parallel`, one or more on their own lines).
pub fn gbnf(tools: &[ToolSpec], parallel: bool) -> Result<String, SchemaError> {
    let mut g = Gbnf::default();
    g.text_without("parameter-text", PARAMETER_END);
    let mut alts = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let params = params_gbnf(&mut g, tools, i, "parameter-text", |k, v| {
            format!(
                "{} {v} {}",
                gbnf_literal(&format!("{PARAMETER}{k}>\n")),
                gbnf_literal(&format!("\n{PARAMETER_END}\n"))
            )
        })?;
        let call = format!("call-{i}");
        g.rule(
            &call,
            &format!(
                "{} {params} {}",
                gbnf_literal(&format!("{OPEN}\n{FUNCTION}{}>\n", t.name)),
                gbnf_literal(&format!("{FUNCTION_END}\n{CLOSE}"))
            ),
        );
        alts.push(call);
    }
    g.rule("call", &alts.join(" | "));
    Ok(g.finish(&repeated("call", &gbnf_literal("\n"), parallel)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tool_call::tests::{check_grammar, weather_tools};
    use crate::chat::tool_call::Format;
    use serde_json::json;

    const ONE: &str = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";

    #[test]
    fn reads_calls_by_the_schema() {
        let tools = weather_tools();
        let r = parse(&format!("I'll check.\n{ONE}"), &tools);
        assert_eq!(r.content, "I'll check.");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].function.name, "get_weather");
        assert_eq!(
            r.tool_calls[0].function.arguments,
            json!({"city": "Paris", "days": 3})
        );
        // Without the tools, values are strings; a string keeps its inner lines.
        let r = parse(
            "<tool_call>\n<function=write>\n<parameter=text>\nline 1\nline 2\n\n</parameter>\n</function>\n</tool_call>",
            &[],
        );
        assert_eq!(
            r.tool_calls[0].function.arguments,
            json!({"text": "line 1\nline 2\n"})
        );
    }

    #[test]
    fn reads_parallel_and_unwrapped_calls() {
        let r = parse(
            &format!("{ONE}\n<tool_call>\n<function=now>\n</function>\n</tool_call>"),
            &weather_tools(),
        );
        let names: Vec<&str> = r
            .tool_calls
            .iter()
            .map(|c| c.function.name.as_str())
            .collect();
        assert_eq!(names, ["get_weather", "now"]);
        assert_eq!(r.content, "");
        let r = parse("<function=now>\n</function>", &[]);
        assert_eq!(r.tool_calls.len(), 1);
    }

    #[test]
    fn a_malformed_call_stays_text() {
        for text in [
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n</tool_call>",
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</tool_call>",
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>",
            "<tool_call>\n<function=get weather>\n</function>\n</tool_call>",
            "plain words",
        ] {
            assert_eq!(parse(text, &[]), Reply::text(text), "{text}");
        }
        // Words after a call are content.
        let r = parse(
            "<tool_call>\n<function=now>\n</function>\n</tool_call> Done.",
            &[],
        );
        assert_eq!((r.tool_calls.len(), r.content.as_str()), (1, "Done."));
    }

    #[test]
    fn the_grammar_accepts_calls_of_the_tools() {
        check_grammar(
            Format::Qwen3Coder,
            &[
                ONE,
                "<tool_call>\n<function=get_weather>\n<parameter=city>\nSaint-Denis </p>\n</parameter>\n</function>\n</tool_call>",
                "<tool_call>\n<function=now>\n</function>\n</tool_call>",
            ],
            &[
                "<tool_call>\n<function=send_mail>\n</function>\n</tool_call>",
                "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>",
                "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>",
                "<tool_call>\n<function=get_weather>\n<parameter=city>\na</parameter>b\n</parameter>\n</function>\n</tool_call>",
            ],
            Some("<tool_call>\n<function=now>\n</function>\n</tool_call>\n<tool_call>\n<function=now>\n</function>\n</tool_call>"),
        );
    }
}
