//! Reading request bodies: JSON parsed into a `serde_json::Value`, then fields read one by one
//! with their type checked, so that every error names the field by its JSON path
//! (`messages[2].content: expected a string`). `null` counts as absent, as in OpenAI's API.

use super::error::ApiError;
use serde_json::{Map, Value};

/// Parses a request body that must be a JSON object.
pub fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "the request body is empty; expected a JSON object",
        ));
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request(format!(
            "the request body must be a JSON object, not {}",
            kind(&v)
        )));
    }
    Ok(v)
}

/// The JSON type name of a value, for messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A JSON object and its path from the body's root (empty for the root).
#[derive(Clone, Copy)]
pub struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: &'a str,
}

impl<'a> Obj<'a> {
    /// The root object of a body from [`parse_body`].
    pub fn root(v: &'a Value) -> Obj<'a> {
        Obj {
            map: v.as_object().expect("parse_body returns objects"),
            path: "",
        }
    }

    /// `v` as an object whose path is `path`.
    pub fn at(v: &'a Value, path: &'a str) -> Result<Obj<'a>, ApiError> {
        match v {
            Value::Object(map) => Ok(Obj { map, path }),
            other => Err(ApiError::field(
                path,
                format!("expected an object, got {}", kind(other)),
            )),
        }
    }

    /// The path of `key` inside this object.
    pub fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Whether `key` is there at all, null included.
    pub fn has(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// The value of `key`, `None` when absent or null.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn wrong(&self, key: &str, want: &str, got: &Value) -> ApiError {
        ApiError::field(
            &self.path_of(key),
            format!("expected {want}, got {}", kind(got)),
        )
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.wrong(key, "a boolean", v)),
        }
    }

    /// The string `key`, which must be given.
    pub fn required_str(&self, key: &str) -> Result<&'a str, ApiError> {
        self.str(key)?
            .ok_or_else(|| ApiError::field(&self.path_of(key), "is required"))
    }

    /// The object's `type`, which must be one of `allowed`; `what` names the objects in the
    /// error (`"parts"`, `"tools"`).
    pub fn kind_of(&self, allowed: &[&str], what: &str) -> Result<&'a str, ApiError> {
        let t = self.required_str("type")?;
        if allowed.contains(&t) {
            return Ok(t);
        }
        let only: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
        Err(ApiError::field(
            &self.path_of("type"),
            format!("'{t}' {what} are not supported (only {})", only.join(", ")),
        ))
    }

    pub fn str(&self, key: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(key, "a string", v)),
        }
    }

    /// A finite number within `range`.
    pub fn f32_in(
        &self,
        key: &str,
        range: std::ops::RangeInclusive<f32>,
    ) -> Result<Option<f32>, ApiError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let x = v.as_f64().ok_or_else(|| self.wrong(key, "a number", v))? as f32;
        if !x.is_finite() || !range.contains(&x) {
            return Err(ApiError::field(
                &self.path_of(key),
                format!(
                    "{x} is out of range (expected {} to {})",
                    range.start(),
                    range.end()
                ),
            ));
        }
        Ok(Some(x))
    }

    /// An integer within `range` (`3.0` counts as an integer, `3.5` does not).
    pub fn int_in(
        &self,
        key: &str,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<Option<i64>, ApiError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let x = match v {
            Value::Number(n) => n.as_i64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i64)
            }),
            _ => None,
        }
        .ok_or_else(|| self.wrong(key, "an integer", v))?;
        if !range.contains(&x) {
            return Err(ApiError::field(
                &self.path_of(key),
                format!(
                    "{x} is out of range (expected {} to {})",
                    range.start(),
                    range.end()
                ),
            ));
        }
        Ok(Some(x))
    }

    pub fn array(&self, key: &str) -> Result<Option<&'a Vec<Value>>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(v) => Err(self.wrong(key, "an array", v)),
        }
    }

    /// Stop sequences: one string or an array of strings (empty strings are dropped).
    pub fn stop(&self, key: &str) -> Result<Vec<String>, ApiError> {
        let out = match self.get(key) {
            None => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(ApiError::field(
                        &format!("{}[{i}]", self.path_of(key)),
                        format!("expected a string, got {}", kind(other)),
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(v) => return Err(self.wrong(key, "a string or an array of strings", v)),
        };
        if out.len() > 16 {
            return Err(ApiError::field(
                &self.path_of(key),
                "at most 16 stop sequences are accepted",
            ));
        }
        Ok(out.into_iter().filter(|s| !s.is_empty()).collect())
    }
}

/// The text of `parts` (at `path`), objects `{"type", "text"}` whose type is one of
/// `text_types`: the texts joined. `what` names the parts in errors.
pub fn text_parts(
    parts: &[Value],
    path: &str,
    text_types: &[&str],
    what: &str,
) -> Result<String, ApiError> {
    let mut text = String::new();
    for (j, part) in parts.iter().enumerate() {
        let ppath = format!("{path}[{j}]");
        let p = Obj::at(part, &ppath)?;
        p.kind_of(text_types, what)?;
        text.push_str(p.required_str("text")?);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_the_path() {
        let v = json!({"a": "x", "n": 1.5, "t": 3.0, "s": ["ok", 2], "o": {"b": true}});
        let o = Obj::root(&v);
        assert_eq!(o.str("a").unwrap(), Some("x"));
        assert_eq!(o.int_in("t", 0..=5).unwrap(), Some(3));
        let e = o.int_in("n", 0..=5).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("n"));
        assert!(e.message.contains("an integer"), "{}", e.message);
        let e = o.stop("s").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("s[1]"));
        let inner = Obj::at(o.get("o").unwrap(), "o").unwrap();
        let e = inner.str("b").unwrap_err();
        assert_eq!(e.message, "o.b: expected a string, got a boolean");
        let e = o.f32_in("t", 0.0..=2.0).unwrap_err();
        assert!(e.message.contains("out of range"), "{}", e.message);
    }

    #[test]
    fn body_must_be_an_object() {
        assert!(parse_body(b"{")
            .unwrap_err()
            .message
            .contains("not valid JSON"));
        assert!(parse_body(b"[1]").unwrap_err().message.contains("an array"));
        assert!(parse_body(b"").is_err());
        assert!(parse_body(b"{}").is_ok());
    }
}
