//! transformers' `tojson` filter for chat templates: Python's `json.dumps(x,
//! ensure_ascii=False, indent=None, separators=None, sort_keys=False)`. Items are separated by
//! `", "` and keys by `": "` (`","` between items once indented), keys stay in their order,
//! nothing is HTML-escaped, and non-ASCII text is written as is unless `ensure_ascii=True`.
//! llama.cpp's template engine writes the same text, so tool definitions and call arguments in
//! a prompt are the bytes the model was trained on.

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};
use std::fmt::Write;

/// How to write JSON, as `json.dumps`' arguments say.
struct Style {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    ensure_ascii: bool,
    sort_keys: bool,
}

/// The filter: `value | tojson`, `tojson(indent=2)`, `tojson(ensure_ascii=True)`, ...
pub fn tojson_filter(value: &Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match indent {
        Some(v) => Some(v),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or("").to_string()),
        Some(v) => Some(" ".repeat(usize::try_from(v)?)),
    };
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let (item_sep, key_sep) = match separators {
        Some(s) if s.len() == 2 => (s[0].clone(), s[1].clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be a pair of strings",
            ))
        }
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let style = Style {
        indent,
        item_sep,
        key_sep,
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_value(&mut out, value, &style, 0)?;
    Ok(Value::from_safe_string(out))
}

/// `json.dumps(v)` of a JSON value, as the filter writes it with no arguments.
pub fn to_python_json(v: &serde_json::Value) -> String {
    let style = Style {
        indent: None,
        item_sep: ", ".to_string(),
        key_sep: ": ".to_string(),
        ensure_ascii: false,
        sort_keys: false,
    };
    let mut out = String::new();
    // A JSON value always has a JSON text.
    let _ = write_value(&mut out, &Value::from_serialize(v), &style, 0);
    out
}

fn newline(out: &mut String, style: &Style, level: usize) {
    if let Some(ind) = &style.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

fn write_value(out: &mut String, v: &Value, style: &Style, level: usize) -> Result<(), Error> {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, v),
        ValueKind::String => write_string(out, v.as_str().unwrap_or(""), style.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            write_seq(out, &items, style, level)?;
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if style.sort_keys {
                keys.sort_by_key(|k| k.to_string());
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline(out, style, level + 1);
                let key = match k.as_str() {
                    Some(s) => s.to_string(),
                    None => k.to_string(),
                };
                write_string(out, &key, style.ensure_ascii);
                out.push_str(&style.key_sep);
                write_value(out, &v.get_item(k)?, style, level + 1)?;
            }
            newline(out, style, level);
            out.push('}');
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: cannot write a {} as JSON", v.kind()),
            ))
        }
    }
    Ok(())
}

fn write_seq(out: &mut String, items: &[Value], style: &Style, level: usize) -> Result<(), Error> {
    if items.is_empty() {
        out.push_str("[]");
        return Ok(());
    }
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&style.item_sep);
        }
        newline(out, style, level + 1);
        write_value(out, item, style, level + 1)?;
    }
    newline(out, style, level);
    out.push(']');
    Ok(())
}

/// Integers as digits; other numbers as Python's `repr` of a float writes them (`1.0`,
/// `1e-05`, `1e+20`).
fn write_number(out: &mut String, v: &Value) {
    if let Ok(i) = i64::try_from(v.clone()) {
        let _ = write!(out, "{i}");
        return;
    }
    let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
    } else {
        out.push_str(&python_float_repr(f));
    }
}

/// Python's `repr(float)`: the shortest round-trip digits, positional from 1e-4 up to 1e16,
/// scientific (`1e-05`, `1.5e+16`) outside.
fn python_float_repr(f: f64) -> String {
    let short = format!("{f:e}"); // e.g. "1.5e16", "1e-5"
    let (mantissa, exp) = short.split_once('e').unwrap_or((&short, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = format!("{f}");
        if s.contains('.') {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

fn write_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && (c as u32) > 0x7e) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// How Python's `str()` writes a list or dict (and what is inside one), which is what a chat
/// template prints for `{{ tools }}` in transformers and llama.cpp: `{'name': 'f', 'ok': True}`.
pub fn py_repr(v: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, v);
    out
}

fn write_repr(out: &mut String, v: &Value) {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::String => write_str_repr(out, v.as_str().unwrap_or("")),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in v.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &item);
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in v.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &key);
                out.push_str(": ");
                write_repr(out, &v.get_item(&key).unwrap_or_default());
            }
            out.push('}');
        }
        _ => {
            let _ = write!(out, "{v}");
        }
    }
}

/// Python's `repr` of a string: single quotes unless the text has one and no double quote.
fn write_str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::Environment;

    fn render(src: &str, value: serde_json::Value) -> String {
        let mut env = Environment::new();
        env.add_filter("tojson", tojson_filter);
        env.render_str(
            src,
            minijinja::context! { x => Value::from_serialize(&value) },
        )
        .unwrap()
    }

    #[test]
    fn writes_what_python_json_dumps_writes() {
        let v = serde_json::json!({"name": "get_weather", "b": [1, 2.5, true, null], "a": "<é\n>"});
        // Keys in their order, ", " and ": ", no HTML escaping, non-ASCII as is.
        assert_eq!(
            render("{{ x | tojson }}", v.clone()),
            r#"{"name": "get_weather", "b": [1, 2.5, true, null], "a": "<é\n>"}"#
        );
        assert_eq!(
            render(
                "{{ x | tojson(ensure_ascii=True) }}",
                serde_json::json!("é😀")
            ),
            r#""\u00e9\ud83d\ude00""#
        );
        assert_eq!(
            render(
                "{{ x | tojson(indent=2) }}",
                serde_json::json!({"a": [1], "b": {}})
            ),
            "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}"
        );
        assert_eq!(
            render(
                "{{ x | tojson(sort_keys=True) }}",
                serde_json::json!({"b": 1, "a": 2})
            ),
            r#"{"a": 2, "b": 1}"#
        );
    }

    #[test]
    fn floats_as_python_repr() {
        for (f, want) in [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (1e-5, "1e-05"),
            (1e20, "1e+20"),
            (1.5e16, "1.5e+16"),
            (123456.789, "123456.789"),
        ] {
            assert_eq!(python_float_repr(f), want, "{f}");
        }
    }
}
