//! Llama 3.1, 3.2 and 3.3: a call is the whole reply, `{"name": ..., "parameters": {...}}`
//! (some write `"type": "function"` first, or `"arguments"`), one a turn; and Llama 3.1 and 3.3
//! call their built-in tools after `<|python_tag|>`: `brave_search.call(query="...")`, or
//! Python code for the code interpreter, read as a call of `python` with `{"code": ...}`.

use super::json_scan::{arguments, value_at};
use super::{call_grammar, Reply, ToolSpec};
use crate::chat::ToolCall;
use crate::sampling::grammar::json_schema::SchemaError;
use serde_json::{json, Map, Value};

const PYTHON_TAG: &str = "<|python_tag|>";

/// The JSON of a call can only begin with a brace; text with braces in it is read whole.
pub const TRIGGERS: &[&str] = &[PYTHON_TAG, "{\"", "{ \"", "{\n"];

/// The call of a finished reply: the reply is a built-in call after `<|python_tag|>`, or the
/// JSON of calls (of one of `tools`, where given) from its start; anything else is content.
pub fn parse(text: &str, tools: &[ToolSpec]) -> Reply {
    if let Some(i) = text.find(PYTHON_TAG) {
        return match builtin_call(&text[i + PYTHON_TAG.len()..]) {
            Some(call) => Reply::calls_or_text(text, &text[..i], vec![call]),
            None => Reply::text(text),
        };
    }
    let mut calls = Vec::new();
    let mut at = 0;
    let mut next = 0;
    while let Some((v, end)) = value_at(text, next) {
        let Some(call) = json_call(&v, tools) else {
            break;
        };
        calls.push(call);
        at = end;
        // Several calls come one after another, some models put `;` between them.
        let rest = &text[end..];
        let gap = rest.len() - rest.trim_start().len();
        next = end + gap + usize::from(rest.trim_start().starts_with(';'));
    }
    Reply::calls_or_text(text, &text[at..], calls)
}

/// `{"name": ..., "parameters": {...}}` as a call, of one of `tools` unless there are none.
fn json_call(v: &Value, tools: &[ToolSpec]) -> Option<ToolCall> {
    let o = v.as_object()?;
    if o.get("type").is_some_and(|t| t != "function") {
        return None;
    }
    let name = o.get("name")?.as_str()?;
    if !tools.is_empty() && !tools.iter().any(|t| t.name == name) {
        return None;
    }
    let args = arguments(Some(o.get("parameters").or_else(|| o.get("arguments"))?))?;
    Some(ToolCall::function("", name, args))
}

/// What follows `<|python_tag|>`: `NAME.call(ARG=JSON, ...)`, or else Python code. A
/// malformed `NAME.call(` is no call.
fn builtin_call(after: &str) -> Option<ToolCall> {
    let code = after.trim();
    if code.is_empty() {
        return None;
    }
    let s = Scan { text: code, at: 0 };
    match s.dotted_call() {
        Dotted::Call(call) => Some(call),
        Dotted::Malformed => None,
        Dotted::NotOne => Some(ToolCall::function("", "python", json!({ "code": code }))),
    }
}

enum Dotted {
    Call(ToolCall),
    Malformed,
    NotOne,
}

/// A cursor over the text after `<|python_tag|>`.
struct Scan<'a> {
    text: &'a str,
    at: usize,
}

impl Scan<'_> {
    fn space(&mut self) {
        let rest = &self.text[self.at..];
        self.at += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, s: &str) -> bool {
        self.space();
        let ok = self.text[self.at..].starts_with(s);
        if ok {
            self.at += s.len();
        }
        ok
    }

    fn ident(&mut self) -> Option<&str> {
        self.space();
        let rest = &self.text[self.at..];
        let n = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if n == 0 || rest.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        self.at += n;
        Some(&rest[..n])
    }

    /// `NAME.call(k=v, ...)` and nothing after it.
    fn dotted_call(mut self) -> Dotted {
        let name = match self.ident() {
            Some(n) => n.to_string(),
            None => return Dotted::NotOne,
        };
        if !(self.eat(".") && self.eat("call") && self.eat("(")) {
            return Dotted::NotOne;
        }
        let mut args = Map::new();
        if !self.eat(")") {
            loop {
                let Some(key) = self.ident().map(str::to_string) else {
                    return Dotted::Malformed;
                };
                if !self.eat("=") {
                    return Dotted::Malformed;
                }
                let Some((v, end)) = value_at(self.text, self.at) else {
                    return Dotted::Malformed;
                };
                self.at = end;
                args.insert(key, v);
                if self.eat(")") {
                    break;
                }
                if !self.eat(",") {
                    return Dotted::Malformed;
                }
            }
        }
        self.space();
        if self.at != self.text.len() {
            return Dotted::Malformed;
        }
        Dotted::Call(ToolCall::function("", name, Value::Object(args)))
    }
}

/// A reply that is one call of one of `tools` (the template renders one call a turn).
pub fn gbnf(tools: &[ToolSpec]) -> Result<String, SchemaError> {
    call_grammar(tools, "parameters", "call")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::tool_call::tests::{check_grammar, weather_tools};
    use crate::chat::tool_call::Format;

    #[test]
    fn reads_a_call_that_is_the_whole_reply() {
        let tools = weather_tools();
        for text in [
            r#"{"name": "get_weather", "parameters": {"city": "Paris"}}"#,
            "\n{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
            r#"{"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}"#,
        ] {
            let r = parse(text, &tools);
            assert_eq!(r.content, "", "{text}");
            assert_eq!(r.tool_calls.len(), 1, "{text}");
            assert_eq!(r.tool_calls[0].function.name, "get_weather");
            assert_eq!(r.tool_calls[0].function.arguments, json!({"city": "Paris"}));
        }
    }

    #[test]
    fn reads_calls_one_after_another() {
        let r = parse(
            r#"{"name": "now", "parameters": {}}; {"name": "get_weather", "parameters": {"city": "Oslo"}}"#,
            &[],
        );
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[1].function.arguments, json!({"city": "Oslo"}));
    }

    #[test]
    fn reads_built_in_tools() {
        let r = parse(
            "<|python_tag|>brave_search.call(query=\"weather in Paris\")",
            &[],
        );
        assert_eq!(r.tool_calls[0].function.name, "brave_search");
        assert_eq!(
            r.tool_calls[0].function.arguments,
            json!({"query": "weather in Paris"})
        );
        let r = parse(
            "<|python_tag|>wolfram_alpha.call(query=\"2+2\", units=\"si\")",
            &[],
        );
        assert_eq!(
            r.tool_calls[0].function.arguments,
            json!({"query": "2+2", "units": "si"})
        );
        let r = parse("Running it.<|python_tag|>print(6 * 7)\n", &[]);
        assert_eq!(r.content, "Running it.");
        assert_eq!(r.tool_calls[0].function.name, "python");
        assert_eq!(
            r.tool_calls[0].function.arguments,
            json!({"code": "print(6 * 7)"})
        );
    }

    #[test]
    fn other_replies_stay_text() {
        let tools = weather_tools();
        for text in [
            "The weather is fine.",
            r#"Here: {"name": "get_weather", "parameters": {"city": "Paris"}}"#,
            r#"{"name": "get_weather", "parameters": {"city": }"#,
            r#"{"name": "get_weather"}"#,
            r#"{"name": "send_mail", "parameters": {}}"#,
            r#"{"type": "object", "name": "get_weather", "parameters": {}}"#,
            "<|python_tag|>brave_search.call(query='single quotes')",
            "<|python_tag|>",
        ] {
            assert_eq!(parse(text, &tools), Reply::text(text), "{text}");
        }
        // Words after a call stay content.
        let r = parse(r#"{"name": "now", "parameters": {}} Done."#, &tools);
        assert_eq!((r.tool_calls.len(), r.content.as_str()), (1, "Done."));
    }

    #[test]
    fn the_grammar_accepts_calls_of_the_tools() {
        check_grammar(
            Format::Llama3,
            &[
                r#"{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}"#,
                r#"{"name": "now", "parameters": {}}"#,
            ],
            &[
                r#"{"name": "send_mail", "parameters": {}}"#,
                r#"{"name": "get_weather", "parameters": {"days": 3}}"#,
                r#"{"name": "get_weather", "parameters": {"city": 3}}"#,
            ],
            None,
        );
    }
}
