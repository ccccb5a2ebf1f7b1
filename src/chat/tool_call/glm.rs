//! GLM's calls: `<tool_call>NAME`, then for each argument `<arg_key>K</arg_key>` and
//! `<arg_value>V</arg_value>`, then `</tool_call>`; GLM 4.5 and 4.6 put each on its own line,
//! GLM 4.7 writes them with nothing between. A string value is written as is, any other as
//! JSON, so reading a value needs the tool's schema (see `xml_args`).

use super::json_scan::expect;
use super::xml_args::{param_schema, params_gbnf, value};
use super::{gbnf_literal, repeated, until, Gbnf, Reply, ToolSpec};
use crate::chat::ToolCall;
use crate::sampling::grammar::json_schema::SchemaError;
use serde_json::{Map, Value};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const KEY: &str = "<arg_key>";
const KEY_END: &str = "</arg_key>";
const VALUE: &str = "<arg_value>";
const VALUE_END: &str = "</arg_value>";

pub const TRIGGERS: &[&str] = &[OPEN];

/// The calls of a finished reply, their values read by the schemas of `tools`; a block that is
/// not a well-formed call stays in the content.
pub fn parse(text: &str, tools: &[ToolSpec]) -> Reply {
    let mut content = String::new();
    let mut calls = Vec::new();
    let mut rest = 0;
    while let Some(i) = text[rest..].find(OPEN).map(|i| rest + i) {
        let after = i + OPEN.len();
        match call_at(text, after, tools) {
            Some((call, end)) => {
                content.push_str(&text[rest..i]);
                calls.push(call);
                rest = end;
            }
            None => {
                content.push_str(&text[rest..after]);
                rest = after;
            }
        }
    }
    content.push_str(&text[rest..]);
    Reply::calls_or_text(text, &content, calls)
}

/// The call whose name starts at `at` (just past `<tool_call>`), and the offset past its
/// `</tool_call>` (or past its last argument, where the reply ends there).
fn call_at(text: &str, at: usize, tools: &[ToolSpec]) -> Option<(ToolCall, usize)> {
    let (name, mut p) = until(text, at, &[KEY, CLOSE]);
    let name = name.trim();
    if name.is_empty() || name.contains(|c: char| c.is_whitespace() || "<>{}\"".contains(c)) {
        return None;
    }
    let mut args = Map::new();
    while let Some(k) = expect(text, p, KEY) {
        let (key, k_end) = until(text, k, &[KEY_END]);
        let v = expect(text, k_end, KEY_END).and_then(|e| expect(text, e, VALUE))?;
        let (raw, v_end) = until(text, v, &[VALUE_END]);
        if v_end == text.len() {
            return None;
        }
        let key = key.trim();
        args.insert(key.to_string(), value(raw, param_schema(tools, name, key)));
        p = v_end + VALUE_END.len();
    }
    let end = match expect(text, p, CLOSE) {
        Some(e) => e,
        None if text[p..].trim().is_empty() => text.len(),
        None => return None,
    };
    Some((ToolCall::function("", name, Value::Object(args)), end))
}

/// One call of `tools` (with `parallel`, one or more), `sep` between the tags (a newline for
/// GLM 4.5 and 4.6, nothing for 4.7).
pub fn gbnf(tools: &[ToolSpec], parallel: bool, sep: &str) -> Result<String, SchemaError> {
    let mut g = Gbnf::default();
    g.text_without("arg-text", VALUE_END);
    let mut alts = Vec::new();
    for (i, t) in tools.iter().enumerate() {
        let params = params_gbnf(&mut g, tools, i, "arg-text", |k, v| {
            format!(
                "{} {v} {}",
                gbnf_literal(&format!("{KEY}{k}{KEY_END}{sep}{VALUE}")),
                gbnf_literal(&format!("{VALUE_END}{sep}"))
            )
        })?;
        let call = format!("call-{i}");
        g.rule(
            &call,
            &format!(
                "{} {params} {}",
                gbnf_literal(&format!("{OPEN}{}{sep}", t.name)),
                gbnf_literal(CLOSE)
            ),
        );
        alts.push(call);
    }
    g.rule("call", &alts.join(" | "));
    Ok(g.finish(&repeated("call", &gbnf_literal(sep), parallel)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tool_call::tests::{check_grammar, weather_tools};
    use crate::chat::tool_call::Format;
    use serde_json::json;

    #[test]
    fn reads_calls_by_the_schema() {
        let tools = weather_tools();
        let r = parse(
            "Let me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
            &tools,
        );
        assert_eq!(r.content, "Let me check.");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].function.name, "get_weather");
        assert_eq!(
            r.tool_calls[0].function.arguments,
            json!({"city": "Paris", "days": 3})
        );
        // Without the tools, every value is a string.
        let r = parse(
            "<tool_call>get_weather<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
            &[],
        );
        assert_eq!(r.tool_calls[0].function.arguments, json!({"days": "3"}));
    }

    #[test]
    fn reads_parallel_calls() {
        let r = parse(
            "<tool_call>now\n</tool_call>\n<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>",
            &weather_tools(),
        );
        let names: Vec<&str> = r
            .tool_calls
            .iter()
            .map(|c| c.function.name.as_str())
            .collect();
        assert_eq!(names, ["now", "get_weather"]);
        assert_eq!(r.tool_calls[0].function.arguments, json!({}));
        assert_eq!(r.content, "");
    }

    #[test]
    fn a_malformed_call_stays_text() {
        for text in [
            "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris\n</tool_call>",
            "<tool_call>get_weather\n<arg_key>city</arg_key>Paris</tool_call>",
            "<tool_call>\n{\"name\": \"get_weather\"}\n</tool_call>",
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value> words",
            "plain words",
        ] {
            assert_eq!(parse(text, &[]), Reply::text(text), "{text}");
        }
    }

    #[test]
    fn the_grammars_accept_calls_of_the_tools() {
        check_grammar(
            Format::Glm,
            &[
                "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris, <France></arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
                "<tool_call>now\n</tool_call>",
            ],
            &[
                "<tool_call>send_mail\n</tool_call>",
                "<tool_call>get_weather\n</tool_call>",
                "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>two</arg_value>\n</tool_call>",
            ],
            Some("<tool_call>now\n</tool_call>\n<tool_call>now\n</tool_call>"),
        );
        check_grammar(
            Format::Glm47,
            &["<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"],
            &["<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"],
            Some("<tool_call>now</tool_call><tool_call>now</tool_call>"),
        );
    }
}
