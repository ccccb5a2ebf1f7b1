//! Arguments written one by one between tags rather than as one JSON object (Qwen3-Coder's
//! `<parameter=P>`, GLM's `<arg_key>`/`<arg_value>`): a string value as written, any other as
//! its JSON. Which one a value is depends on the tool's schema: reading needs the tools, and the
//! grammar writes each parameter the way its schema asks.

use super::{gbnf_literal, Gbnf, ToolSpec};
use crate::sampling::grammar::json_schema::SchemaError;
use serde_json::Value;

/// How a parameter's value is written.
enum Kind {
    /// As written: a string, or a value of any type.
    Text,
    /// One of these strings, as written.
    Words(Vec<String>),
    /// As JSON.
    Json,
}

fn kind(schema: &Value) -> Kind {
    let strings = |vs: &[Value]| -> Option<Vec<String>> {
        vs.iter().map(|v| v.as_str().map(str::to_string)).collect()
    };
    if let Some(Value::Array(vs)) = schema.get("enum") {
        return strings(vs).map_or(Kind::Json, Kind::Words);
    }
    if let Some(c) = schema.get("const") {
        return c
            .as_str()
            .map_or(Kind::Json, |s| Kind::Words(vec![s.to_string()]));
    }
    match schema.get("type") {
        Some(Value::String(t)) if t == "string" => Kind::Text,
        Some(Value::Array(ts)) if ts.iter().any(|t| t == "string") => Kind::Text,
        Some(_) => Kind::Json,
        None => {
            let branches = schema
                .get("anyOf")
                .or_else(|| schema.get("oneOf"))
                .and_then(Value::as_array);
            match branches {
                Some(bs) if bs.iter().all(|b| matches!(kind(b), Kind::Json)) => Kind::Json,
                Some(_) => Kind::Text,
                // `$ref` is followed by the converter only: its value is written as JSON.
                None if schema.get("$ref").is_some() => Kind::Json,
                None => Kind::Text,
            }
        }
    }
}

/// The schema of parameter `param` of the tool `tool`, where the tools say.
pub fn param_schema<'a>(tools: &'a [ToolSpec], tool: &str, param: &str) -> Option<&'a Value> {
    tools
        .iter()
        .find(|t| t.name == tool)?
        .parameters
        .get("properties")?
        .get(param)
}

/// The value written as `raw`: a string unless the schema asks for another type and `raw` is
/// its JSON (or Python's `True`, `False`, `None`, which some templates write).
pub fn value(raw: &str, schema: Option<&Value>) -> Value {
    if !schema.is_some_and(|s| matches!(kind(s), Kind::Json)) {
        return Value::String(raw.to_string());
    }
    let t = raw.trim();
    serde_json::from_str(t).unwrap_or_else(|_| match t {
        "True" => Value::Bool(true),
        "False" => Value::Bool(false),
        "None" => Value::Null,
        _ => Value::String(raw.to_string()),
    })
}

/// Defines in `g` the parameters of `tools[i]` in the order of its schema, each
/// `param(name, value)` (a GBNF expression around the value's expression), the required ones
/// always and the others where the model wants; returns the expression for all of them. A
/// string value is `text` (a rule that stops before the closing tag), any other the JSON its
/// schema asks for.
pub fn params_gbnf(
    g: &mut Gbnf,
    tools: &[ToolSpec],
    i: usize,
    text: &str,
    param: impl Fn(&str, &str) -> String,
) -> Result<String, SchemaError> {
    let t = &tools[i];
    let p = &t.parameters;
    let problem = |what: &str| SchemaError {
        path: "/".to_string(),
        problem: format!(
            "tool '{}': this format writes arguments one by one, so the parameters must be \
             an object schema with 'properties' ({what})",
            t.name
        ),
    };
    if !p.is_object() {
        return Err(problem("not an object schema"));
    }
    for key in ["anyOf", "oneOf", "allOf", "$ref"] {
        if p.get(key).is_some() {
            return Err(problem(&format!("'{key}' at the top")));
        }
    }
    if p.get("type").is_some_and(|ty| ty != "object") {
        return Err(problem("its type is not 'object'"));
    }
    let Some(props) = p.get("properties").and_then(Value::as_object) else {
        return Ok("\"\"".to_string());
    };
    let required: Vec<&str> = p
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut seq = Vec::new();
    for (j, (name, schema)) in props.iter().enumerate() {
        let v = match kind(schema) {
            Kind::Text => text.to_string(),
            Kind::Words(ws) => {
                let alts: Vec<String> = ws.iter().map(|w| gbnf_literal(w)).collect();
                format!("( {} )", alts.join(" | "))
            }
            Kind::Json => {
                let rule = format!("param-{i}-{j}");
                g.json(&rule, schema)?;
                rule
            }
        };
        let one = param(name, &v);
        if required.contains(&name.as_str()) {
            seq.push(one);
        } else {
            seq.push(format!("( {one} )?"));
        }
    }
    if seq.is_empty() {
        return Ok("\"\"".to_string());
    }
    Ok(seq.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_follow_the_schema() {
        let int = json!({"type": "integer"});
        let string = json!({"type": "string"});
        let either = json!({"type": ["string", "null"]});
        let list = json!({"type": "array", "items": {"type": "integer"}});
        assert_eq!(value("3", Some(&int)), json!(3));
        assert_eq!(value(" 3 ", Some(&int)), json!(3));
        assert_eq!(value("3", Some(&string)), json!("3"));
        assert_eq!(value("3", Some(&either)), json!("3"));
        assert_eq!(value("3", None), json!("3"));
        assert_eq!(value("[1, 2]", Some(&list)), json!([1, 2]));
        assert_eq!(
            value("True", Some(&json!({"type": "boolean"}))),
            json!(true)
        );
        assert_eq!(value("many", Some(&int)), json!("many"));
        assert_eq!(value("a", Some(&json!({"enum": ["a", "b"]}))), json!("a"));
        assert_eq!(
            value(
                "1",
                Some(&json!({"anyOf": [{"type": "integer"}, {"type": "null"}]}))
            ),
            json!(1)
        );
    }
}
