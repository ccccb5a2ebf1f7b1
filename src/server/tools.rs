//! A chat request's tools as llama-server reads them with `--jinja`: `tools` (OpenAI's
//! `[{"type": "function", "function": {"name", "description", "parameters"}}]`), rendered by the
//! model's template; `tool_choice` (`auto`, `none`, `required`, or a named function) and
//! `parallel_tool_calls`. A forced choice constrains the reply with a grammar of calls in the
//! template's format, so the call always parses and its arguments match the tool's schema;
//! with `auto` the same grammar is lazy, as llama.cpp's: the reply is free until a call
//! starts (one of the format's trigger strings), and the call is held to the grammar.

use super::error::ApiError;
use super::json::{kind, Obj};
use crate::chat::tool_call::{Format, ToolSpec};
use crate::sampling::Grammar;
use serde_json::Value;

/// What a request's `tool_choice` asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// The model decides (the default when tools are given).
    Auto,
    /// No calls: the template still shows the tools (as llama.cpp renders them), but nothing
    /// is forced and the reply is not read for calls.
    None,
    /// At least one call of any tool.
    Required,
    /// A call of this function.
    Function(String),
}

/// The tools of a chat request.
#[derive(Clone, Debug)]
pub struct Tools {
    /// As given, for the template's `tools`.
    pub json: Value,
    pub specs: Vec<ToolSpec>,
    pub choice: Choice,
    /// More than one call in a reply (`parallel_tool_calls`; llama-server's default: no).
    pub parallel: bool,
}

impl Tools {
    /// The request's tools; `None` when it gives none (or an empty list).
    pub fn read(o: &Obj) -> Result<Option<Tools>, ApiError> {
        let Some(items) = o.array("tools")? else {
            if o.get("tool_choice").is_some() {
                read_choice(o, &[])?;
            }
            return Ok(None);
        };
        if items.is_empty() {
            return Ok(None);
        }
        let mut specs = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let path = format!("tools[{i}]");
            let t = Obj::at(item, &path)?;
            t.kind_of(&["function"], "tools")?;
            let fpath = t.path_of("function");
            let f = Obj::at(
                t.get("function")
                    .ok_or_else(|| ApiError::field(&fpath, "is required"))?,
                &fpath,
            )?;
            let name = f.required_str("name")?;
            if name.is_empty() {
                return Err(ApiError::field(&f.path_of("name"), "must not be empty"));
            }
            if specs.iter().any(|s: &ToolSpec| s.name == name) {
                return Err(ApiError::field(
                    &f.path_of("name"),
                    format!("'{name}' is given twice"),
                ));
            }
            f.str("description")?;
            let parameters = match f.get("parameters") {
                None => serde_json::json!({"type": "object", "properties": {}}),
                Some(p @ Value::Object(_)) => p.clone(),
                Some(other) => {
                    return Err(ApiError::field(
                        &f.path_of("parameters"),
                        format!("expected a JSON schema object, got {}", kind(other)),
                    ))
                }
            };
            specs.push(ToolSpec {
                name: name.to_string(),
                parameters,
            });
        }
        let choice = read_choice(o, &specs)?;
        let parallel = o.bool("parallel_tool_calls")?.unwrap_or(false);
        Ok(Some(Tools {
            json: Value::Array(items.clone()),
            specs,
            choice,
            parallel,
        }))
    }

    /// The grammar the choice puts on the reply, in `format`: from the start for a forced
    /// choice; from a trigger on for `auto` (`None` where the format has no trigger); `None`
    /// for `none`. A tool whose schema no grammar can express is refused, naming the tool.
    pub fn grammar(&self, format: Format) -> Result<Option<CallGrammar>, ApiError> {
        let triggers = match self.choice {
            Choice::Auto if format.triggers().is_empty() => return Ok(None),
            Choice::Auto => format.triggers().iter().map(|t| t.to_string()).collect(),
            _ => Vec::new(),
        };
        let specs: Vec<ToolSpec> = match &self.choice {
            Choice::None => return Ok(None),
            Choice::Auto | Choice::Required => self.specs.clone(),
            Choice::Function(name) => self
                .specs
                .iter()
                .filter(|s| &s.name == name)
                .cloned()
                .collect(),
        };
        // Name the tool whose schema fails, rather than the combined grammar.
        for (i, s) in self.specs.iter().enumerate() {
            if specs.iter().any(|k| k.name == s.name) {
                format
                    .call_gbnf(std::slice::from_ref(s), false)
                    .map_err(|e| {
                        ApiError::field(
                            &format!("tools[{i}].function.parameters"),
                            format!("the schema cannot constrain a tool call: {e}"),
                        )
                    })?;
            }
        }
        let gbnf = format.call_gbnf(&specs, self.parallel).map_err(|e| {
            ApiError::field("tools", format!("cannot constrain the tool calls: {e}"))
        })?;
        let grammar = Grammar::parse(&gbnf).map_err(|e| {
            ApiError::field(
                "tool_choice",
                format!(
                    "the {} tool-call grammar does not compile: {e}",
                    format.name()
                ),
            )
        })?;
        Ok(Some(CallGrammar {
            grammar,
            gbnf,
            triggers,
        }))
    }
}

/// The grammar of a request's tool calls.
#[derive(Debug)]
pub struct CallGrammar {
    pub grammar: Grammar,
    /// Its text.
    pub gbnf: String,
    /// Non-empty: the grammar is lazy and starts where one of these does.
    pub triggers: Vec<String>,
}

fn read_choice(o: &Obj, specs: &[ToolSpec]) -> Result<Choice, ApiError> {
    let choice = match o.get("tool_choice") {
        None => Choice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => Choice::Auto,
            "none" => Choice::None,
            "required" => Choice::Required,
            other => {
                return Err(ApiError::field(
                    "tool_choice",
                    format!("'{other}' is not one of auto, none, required or a function"),
                ))
            }
        },
        Some(v @ Value::Object(_)) => {
            let c = Obj::at(v, "tool_choice")?;
            let fpath = c.path_of("function");
            let f = Obj::at(
                c.get("function")
                    .ok_or_else(|| ApiError::field(&fpath, "is required"))?,
                &fpath,
            )?;
            let name = f.required_str("name")?;
            if !specs.iter().any(|s| s.name == name) {
                return Err(ApiError::field(
                    &f.path_of("name"),
                    format!("'{name}' is not one of the request's tools"),
                ));
            }
            Choice::Function(name.to_string())
        }
        Some(other) => {
            return Err(ApiError::field(
                "tool_choice",
                format!("expected a string or an object, got {}", kind(other)),
            ))
        }
    };
    if specs.is_empty() && matches!(choice, Choice::Required | Choice::Function(_)) {
        return Err(ApiError::field(
            "tool_choice",
            "asks for a call but no tools are given",
        ));
    }
    Ok(choice)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<Option<Tools>, ApiError> {
        Tools::read(&Obj::root(&v))
    }

    fn weather() -> Value {
        json!({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
    }

    #[test]
    fn reads_tools_and_choices() {
        let t = read(json!({"tools": [weather()]})).unwrap().unwrap();
        assert_eq!(t.specs[0].name, "get_weather");
        assert_eq!(t.choice, Choice::Auto);
        assert!(!t.parallel);
        let t = read(json!({"tools": [weather()], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}, "parallel_tool_calls": true})).unwrap().unwrap();
        assert_eq!(t.choice, Choice::Function("get_weather".into()));
        assert!(t.parallel);
        assert!(read(json!({"tools": []})).unwrap().is_none());
        let forced = t.grammar(Format::Hermes).unwrap().unwrap();
        assert!(forced.triggers.is_empty());
        let auto = read(json!({"tools": [weather()], "tool_choice": "auto"}))
            .unwrap()
            .unwrap();
        let lazy = auto.grammar(Format::Hermes).unwrap().unwrap();
        assert_eq!(lazy.triggers, ["<tool_call>"]);
        assert!(auto.grammar(Format::Generic).unwrap().is_none());
        let none = read(json!({"tools": [weather()], "tool_choice": "none"}))
            .unwrap()
            .unwrap();
        assert!(none.grammar(Format::Hermes).unwrap().is_none());
    }

    #[test]
    fn bad_tools_name_the_field() {
        let cases = [
            (json!({"tools": [{"type": "retrieval"}]}), "tools[0].type"),
            (
                json!({"tools": [{"type": "function"}]}),
                "tools[0].function",
            ),
            (
                json!({"tools": [{"type": "function", "function": {}}]}),
                "tools[0].function.name",
            ),
            (
                json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]}),
                "tools[0].function.parameters",
            ),
            (
                json!({"tools": [weather(), weather()]}),
                "tools[1].function.name",
            ),
            (
                json!({"tools": [weather()], "tool_choice": "sometimes"}),
                "tool_choice",
            ),
            (
                json!({"tools": [weather()], "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
                "tool_choice.function.name",
            ),
            (json!({"tool_choice": "required"}), "tool_choice"),
        ];
        for (body, field) in cases {
            let e = read(body.clone()).unwrap_err();
            assert!(
                e.to_string().starts_with(&format!("{field}:")),
                "{body}: {e}"
            );
        }
    }

    #[test]
    fn a_schema_no_grammar_expresses_is_refused_naming_the_tool() {
        let t = read(json!({"tools": [weather(), {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "string", "pattern": "a+"}}}}}], "tool_choice": "required"})).unwrap().unwrap();
        let e = t.grammar(Format::Hermes).unwrap_err();
        assert!(
            e.to_string().starts_with("tools[1].function.parameters:"),
            "{e}"
        );
    }
}
