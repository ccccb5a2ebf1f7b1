//! Command R7B's calls: a JSON list after `<|START_ACTION|>`,
//! `[{"tool_call_id": "0", "tool_name": ..., "parameters": {...}}, ...]`, closed by
//! `<|END_ACTION|>`; words go between `<|START_RESPONSE|>` and `<|END_RESPONSE|>`, whose markers
//! are left out of the content. The plan before a call (`<|START_THINKING|>...
//! <|END_THINKING|>`) stays in the content as written. The model's ids count from 0 in each
//! turn, so they are not kept: the server gives each call its own.

use super::json_scan::{arguments, expect, value_at};
use super::{gbnf_literal, json_name_literal, repeated, Gbnf, Reply, ToolSpec};
use crate::chat::ToolCall;
use crate::sampling::grammar::json_schema::SchemaError;
use serde_json::Value;

const START_ACTION: &str = "<|START_ACTION|>";
const END_ACTION: &str = "<|END_ACTION|>";
const START_RESPONSE: &str = "<|START_RESPONSE|>";
const END_RESPONSE: &str = "<|END_RESPONSE|>";
const START_THINKING: &str = "<|START_THINKING|>";
const END_THINKING: &str = "<|END_THINKING|>";

/// The calls of a finished reply; a malformed action leaves the whole reply as content.
pub fn parse(text: &str) -> Reply {
    let Some(i) = text.find(START_ACTION) else {
        return Reply::text(&without_response_markers(text));
    };
    let Some((calls, end)) = action_at(text, i + START_ACTION.len()) else {
        return Reply::text(text);
    };
    let content = format!("{}{}", &text[..i], &text[end..]);
    Reply::calls_or_text(text, &without_response_markers(&content), calls)
}

/// The list of calls at `at`, and the offset past `<|END_ACTION|>` (or past the list, where
/// the reply ends there).
fn action_at(text: &str, at: usize) -> Option<(Vec<ToolCall>, usize)> {
    let (v, end) = value_at(text, at)?;
    let Value::Array(items) = v else {
        return None;
    };
    let calls = items
        .iter()
        .map(|c| {
            let name = c.get("tool_name")?.as_str()?;
            let args = arguments(c.get("parameters"))?;
            Some(ToolCall::function("", name, args))
        })
        .collect::<Option<Vec<_>>>()?;
    if calls.is_empty() {
        return None;
    }
    let end = match expect(text, end, END_ACTION) {
        Some(e) => e,
        None if text[end..].trim().is_empty() => text.len(),
        None => return None,
    };
    Some((calls, end))
}

/// `text` without the markers around words (Command R7B's, and Cohere2 MoE's `<|START_TEXT|>`).
fn without_response_markers(text: &str) -> String {
    [
        START_RESPONSE,
        END_RESPONSE,
        "<|START_TEXT|>",
        "<|END_TEXT|>",
    ]
    .iter()
    .fold(text.to_string(), |t, m| t.replace(m, ""))
}

/// An action of calls of `tools` (one, or with `parallel` several), after the model's plan
/// where it writes one.
pub fn gbnf(tools: &[ToolSpec], parallel: bool) -> Result<String, SchemaError> {
    let mut g = Gbnf::default();
    g.tool_calls(tools, |t, args| {
        format!(
            "{} [0-9]{{1,3}} {} {} {} {args} {}",
            gbnf_literal("{\"tool_call_id\": \""),
            gbnf_literal("\", \"tool_name\": "),
            json_name_literal(&t.name),
            gbnf_literal(", \"parameters\": "),
            gbnf_literal("}"),
        )
    })?;
    g.text_without("plan", END_THINKING);
    Ok(g.finish(&format!(
        "( {} plan {} )? {} {} {}",
        gbnf_literal(START_THINKING),
        gbnf_literal(END_THINKING),
        gbnf_literal(&format!("{START_ACTION}[\n    ")),
        repeated("call", &gbnf_literal(",\n    "), parallel),
        gbnf_literal(&format!("\n]{END_ACTION}")),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tool_call::tests::check_grammar;
    use crate::chat::tool_call::Format;
    use serde_json::json;

    #[test]
    fn reads_an_action() {
        let text = "<|START_THINKING|>I will look up the weather.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}},\n    {\"tool_call_id\": \"1\", \"tool_name\": \"now\", \"parameters\": {}}\n]<|END_ACTION|>";
        let r = parse(text);
        assert_eq!(
            r.content,
            "<|START_THINKING|>I will look up the weather.<|END_THINKING|>"
        );
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].id, "");
        assert_eq!(r.tool_calls[0].function.name, "get_weather");
        assert_eq!(r.tool_calls[0].function.arguments, json!({"city": "Paris"}));
        assert_eq!(r.tool_calls[1].function.name, "now");
    }

    #[test]
    fn words_lose_their_markers() {
        assert_eq!(
            parse("<|START_RESPONSE|>It is sunny.<|END_RESPONSE|>"),
            Reply::text("It is sunny.")
        );
        assert_eq!(parse("It is sunny."), Reply::text("It is sunny."));
        assert_eq!(
            parse("<|START_TEXT|>It is sunny.<|END_TEXT|>"),
            Reply::text("It is sunny.")
        );
    }

    #[test]
    fn a_malformed_action_stays_text() {
        for text in [
            "<|START_ACTION|>[{\"tool_name\": \"a\", \"parameters\": {\"x\": }]<|END_ACTION|>",
            "<|START_ACTION|>[{\"parameters\": {}}]<|END_ACTION|>",
            "<|START_ACTION|>{\"tool_name\": \"a\"}<|END_ACTION|>",
            "<|START_ACTION|>[]<|END_ACTION|>",
            "<|START_ACTION|>[{\"tool_name\": \"a\"}] then words",
        ] {
            assert_eq!(parse(text), Reply::text(text), "{text}");
        }
    }

    #[test]
    fn the_grammar_accepts_calls_of_the_tools() {
        let one = "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}\n]<|END_ACTION|>";
        check_grammar(
            Format::CommandR7b,
            &[
                one,
                &format!("<|START_THINKING|>Weather, then.<|END_THINKING|>{one}"),
                "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"now\", \"parameters\": {}}\n]<|END_ACTION|>",
            ],
            &[
                "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"send_mail\", \"parameters\": {}}\n]<|END_ACTION|>",
                "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {}}\n]<|END_ACTION|>",
                "<|START_RESPONSE|>Hi<|END_RESPONSE|>",
            ],
            Some("<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"now\", \"parameters\": {}},\n    {\"tool_call_id\": \"1\", \"tool_name\": \"now\", \"parameters\": {}}\n]<|END_ACTION|>"),
        );
    }
}
