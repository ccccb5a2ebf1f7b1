//! Reading one JSON value out of running text: a call's JSON sits between a format's markers,
//! followed by more text.

use serde_json::Value;

/// The JSON value that starts at `text[at..]` (after any whitespace), and the byte offset just
/// past it. `None` when no complete value starts there.
pub fn value_at(text: &str, at: usize) -> Option<(Value, usize)> {
    let rest = text.get(at..)?;
    let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
    match stream.next() {
        Some(Ok(v)) => Some((v, at + stream.byte_offset())),
        _ => None,
    }
}

/// `text[at..]` after whitespace starts with `marker`: the offset past it.
pub fn expect(text: &str, at: usize, marker: &str) -> Option<usize> {
    let rest = text.get(at..)?;
    let skipped = rest.len() - rest.trim_start().len();
    rest.trim_start()
        .starts_with(marker)
        .then(|| at + skipped + marker.len())
}

/// A call's arguments as a JSON value: an object as written, or a string that holds one (some
/// models quote them); `None` for anything else.
pub fn arguments(v: Option<&Value>) -> Option<Value> {
    match v {
        None => Some(Value::Object(Default::default())),
        Some(Value::Object(_)) => v.cloned(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(obj @ Value::Object(_)) => Some(obj),
            _ => None,
        },
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_a_value_in_running_text() {
        let t = r#"say <x> {"a": [1, "}"]} and more"#;
        let (v, end) = value_at(t, 7).unwrap();
        assert_eq!(v, json!({"a": [1, "}"]}));
        assert_eq!(&t[end..], " and more");
        assert!(value_at(r#"{"a": "#, 0).is_none());
        assert_eq!(expect(" \n</x>tail", 0, "</x>"), Some(6));
        assert_eq!(expect("x</x>", 0, "</x>"), None);
    }

    #[test]
    fn arguments_as_objects() {
        assert_eq!(arguments(Some(&json!({"a": 1}))), Some(json!({"a": 1})));
        assert_eq!(arguments(Some(&json!("{\"a\": 1}"))), Some(json!({"a": 1})));
        assert_eq!(arguments(None), Some(json!({})));
        assert_eq!(arguments(Some(&json!([1]))), None);
        assert_eq!(arguments(Some(&json!("nope"))), None);
    }
}
