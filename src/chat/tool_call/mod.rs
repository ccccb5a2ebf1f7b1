//! Tool calls in a model's reply: which format a chat template teaches its model
//! ([`Format::detect`]), reading the calls out of a finished reply ([`Format::parse`]), where a
//! call may begin in a stream ([`Format::triggers`]), and the grammar that makes the model write
//! a well-formed call of one of the given tools ([`Format::call_gbnf`]). One file per format
//! family, each with replies written by hand in its format as tests.
//!
//! A reply that does not parse as the format's calls is returned as content, never an error: a
//! model may always answer in words.

mod generic;
mod hermes;
mod json_scan;

use super::ToolCall;
use crate::sampling::grammar::json_schema::{self, SchemaError};
use serde_json::{json, Value};

/// A function the model may call: its name and the JSON schema of its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub parameters: Value,
}

/// A reply read by a format: the text meant for the user, and the calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reply {
    pub content: String,
    /// In the order written; a call's `id` is empty where the format carries none (the server
    /// gives each one).
    pub tool_calls: Vec<ToolCall>,
}

impl Reply {
    /// A reply of text only.
    pub fn text(content: &str) -> Reply {
        Reply {
            content: content.to_string(),
            tool_calls: Vec::new(),
        }
    }
}

/// A tool-call format, named after the model family that writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`: Hermes 2 Pro and 3,
    /// Qwen 2.5 (and its Coder models), Qwen 3, SmolLM3 and others trained on it.
    Hermes,
    /// llama.cpp's generic format for templates that teach none: the whole reply is JSON,
    /// `{"tool_call": {"name", "arguments"}}`, `{"tool_calls": [...]}` or `{"response": "..."}`.
    Generic,
}

impl Format {
    /// The format a chat template's source teaches (the generic one when it names none).
    pub fn detect(template: &str) -> Format {
        if template.contains("<tool_call>") {
            Format::Hermes
        } else {
            Format::Generic
        }
    }

    /// A short name for messages and logs.
    pub fn name(self) -> &'static str {
        match self {
            Format::Hermes => "hermes",
            Format::Generic => "generic",
        }
    }

    /// The calls in a finished reply, and the text around them as content.
    pub fn parse(self, text: &str) -> Reply {
        match self {
            Format::Hermes => hermes::parse(text),
            Format::Generic => generic::parse(text),
        }
    }

    /// Texts that begin a call: a stream holds back what follows one (and a partial one at its
    /// end) until the reply is parsed. Empty: the whole reply must be read first.
    pub fn triggers(self) -> &'static [&'static str] {
        match self {
            Format::Hermes => hermes::TRIGGERS,
            Format::Generic => &[],
        }
    }

    /// GBNF for a reply that is only a call of one of `tools` (with `parallel`, one or more
    /// calls) in this format, the arguments matching the tool's schema.
    pub fn call_gbnf(self, tools: &[ToolSpec], parallel: bool) -> Result<String, SchemaError> {
        match self {
            Format::Hermes => hermes::gbnf(tools, parallel),
            Format::Generic => generic::gbnf(tools, parallel),
        }
    }
}

/// GBNF whose `root` is `one` (an expression using the rule `call-json`: one call's JSON, an
/// object matching one of `call_schemas`), or with `parallel` several of them separated by
/// `separator` (a GBNF expression).
fn call_grammar(
    call_schemas: &[Value],
    one: &str,
    parallel: bool,
    separator: &str,
) -> Result<String, SchemaError> {
    let schema = match call_schemas {
        [one] => one.clone(),
        many => json!({ "anyOf": many }),
    };
    let gbnf = json_schema::to_gbnf(&schema)?;
    // The converter's first line defines `root`: that is the call's JSON here.
    let body = gbnf
        .strip_prefix("root ::= ")
        .expect("the schema grammar starts with its root");
    let root = if parallel {
        format!("root ::= call ( {separator} call )*\ncall ::= {one}\n")
    } else {
        format!("root ::= {one}\n")
    };
    Ok(format!("{root}call-json ::= {body}"))
}

/// A GBNF string literal for `s`.
fn gbnf_literal(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The JSON text of a tool's name as a GBNF literal: `"\"get_weather\""`.
fn json_name_literal(name: &str) -> String {
    gbnf_literal(&serde_json::Value::String(name.to_string()).to_string())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::sampling::grammar::{Grammar, Matcher};
    use std::sync::Arc;

    /// Whether the grammar `gbnf` accepts exactly `text`.
    pub fn accepts(gbnf: &str, text: &str) -> bool {
        let g = Grammar::parse(gbnf).unwrap_or_else(|e| panic!("{e}\n{gbnf}"));
        let mut m = Matcher::new(Arc::new(g));
        m.advance(text.as_bytes()) && m.can_end()
    }

    #[test]
    fn detects_from_the_template_source() {
        assert_eq!(
            Format::detect("{{- '<tool_call>\\n{\"name\": \"' }}"),
            Format::Hermes
        );
        assert_eq!(Format::detect("{{ messages }}"), Format::Generic);
    }

    #[test]
    fn literals_escape() {
        assert_eq!(gbnf_literal("a\"b\n"), r#""a\"b\n""#);
        assert_eq!(json_name_literal("f"), r#""\"f\"""#);
    }
}
