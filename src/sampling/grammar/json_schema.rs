//! JSON schema to GBNF, after llama.cpp's `json-schema-to-grammar`: objects (required and
//! optional properties in declared order), arrays (`items`, `minItems`, `maxItems`), `enum`,
//! `const`, `anyOf`/`oneOf`, local `$ref`s, strings (`minLength`, `maxLength`, and the formats
//! `date`, `time`, `date-time`, `uuid`, `email` as approximations), integers with
//! `minimum`/`maximum` (exact digit-range rules), numbers with integral bounds, booleans and
//! null. Keywords that would constrain the output in ways the grammar cannot (`pattern`,
//! `multipleOf`, `allOf`, ...) are errors, never silently ignored.

use super::Grammar;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::fmt::Write;

/// A schema that cannot be turned into a grammar: the JSON pointer of the place, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("at {path}: {problem}")]
pub struct SchemaError {
    pub path: String,
    pub problem: String,
}

/// The compiled grammar of documents that match `schema`: what a request or a flag asks for.
pub fn to_grammar(schema: &Value) -> Result<Grammar, SchemaError> {
    compile(&convert(schema)?)
}

/// GBNF text for documents that match `schema`; the text is known to compile.
pub fn to_gbnf(schema: &Value) -> Result<String, SchemaError> {
    let gbnf = convert(schema)?;
    compile(&gbnf)?;
    Ok(gbnf)
}

fn convert(schema: &Value) -> Result<String, SchemaError> {
    let mut c = Converter {
        root: schema,
        rules: Vec::new(),
        names: HashMap::new(),
        refs: HashMap::new(),
    };
    let root = c.visit(schema, "/", "root")?;
    let mut out = String::new();
    let _ = writeln!(out, "root ::= {root}");
    for (name, body) in &c.rules {
        let _ = writeln!(out, "{name} ::= {body}");
    }
    out.push_str(PRIMITIVES);
    Ok(out)
}

/// Compiles converted text. A schema may reach itself through '$ref' with nothing matched in
/// between ({"$ref": "#"}); no grammar can express that, and compiling is what notices.
fn compile(gbnf: &str) -> Result<Grammar, SchemaError> {
    Grammar::parse(gbnf).map_err(|e| {
        let problem = if e.to_string().contains("left-recursive") {
            format!("'$ref' leads back to the same schema without matching anything: {e}")
        } else {
            format!("the schema gives a grammar that does not compile: {e}")
        };
        err("/", problem)
    })
}

/// Shared rules every generated grammar may use.
const PRIMITIVES: &str = r#"space ::= | " " | "\n" [ \t]{0,20}
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char* "\"" space
boolean ::= ("true" | "false") space
null ::= "null" space
integer ::= ("-"? integral-part) space
integral-part ::= [0] | [1-9] [0-9]{0,15}
decimal-part ::= [0-9]{1,16}
number ::= ("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space
value ::= object | array | string | number | boolean | null
object ::= "{" space ( string ":" space value ("," space string ":" space value)* )? "}" space
array ::= "[" space ( value ("," space value)* )? "]" space
hex ::= [0-9a-fA-F]
date ::= [0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )
time ::= ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )
date-string ::= "\"" date "\"" space
time-string ::= "\"" time "\"" space
date-time-string ::= "\"" date "T" time "\"" space
uuid-string ::= "\"" hex{8} "-" hex{4} "-" hex{4} "-" hex{4} "-" hex{12} "\"" space
email-string ::= "\"" [a-zA-Z0-9._+-]{1,32} "@" [a-zA-Z0-9-]{1,24} ( "." [a-zA-Z0-9-]{1,24} ){0,3} "." [a-zA-Z]{2,6} "\"" space
"#;

/// Keywords that constrain values in ways this converter does not support.
const UNSUPPORTED: &[&str] = &[
    "pattern",
    "multipleOf",
    "allOf",
    "not",
    "if",
    "patternProperties",
    "dependentRequired",
    "dependentSchemas",
    "uniqueItems",
    "contains",
    "prefixItems",
    "minProperties",
    "maxProperties",
];

/// Annotations and keywords handled elsewhere (or with no effect on values).
const KNOWN: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "enum",
    "const",
    "anyOf",
    "oneOf",
    "$ref",
    "$defs",
    "definitions",
    "minLength",
    "maxLength",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "title",
    "description",
    "$schema",
    "$id",
    "$comment",
    "default",
    "examples",
    "strict",
    "name",
    "schema",
];

struct Converter<'a> {
    root: &'a Value,
    rules: Vec<(String, String)>,
    names: HashMap<String, usize>,
    /// `$ref` target → rule name (so recursive schemas work).
    refs: HashMap<String, String>,
}

fn err(path: &str, problem: impl Into<String>) -> SchemaError {
    SchemaError {
        path: path.to_string(),
        problem: problem.into(),
    }
}

/// A GBNF string literal for `s`.
pub fn lit(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The JSON text of a value as a GBNF literal, followed by optional space.
fn json_lit(v: &Value) -> String {
    format!("{} space", lit(&v.to_string()))
}

fn rule_base(hint: &str) -> String {
    let s: String = hint
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let s = s.trim_matches('-').to_string();
    if s.is_empty() {
        "r".to_string()
    } else {
        s
    }
}

impl<'a> Converter<'a> {
    /// Adds a rule named after `hint` (made unique) and returns its name.
    fn add(&mut self, hint: &str, body: String) -> String {
        let base = rule_base(hint);
        let n = self.names.entry(base.clone()).or_insert(0);
        *n += 1;
        let name = if *n == 1 && !RESERVED.contains(&base.as_str()) {
            base
        } else {
            format!("{base}-{n}")
        };
        self.rules.push((name.clone(), body));
        name
    }

    /// The grammar expression for `schema` at JSON pointer `path`.
    fn visit(&mut self, schema: &'a Value, path: &str, hint: &str) -> Result<String, SchemaError> {
        let o = match schema {
            Value::Bool(true) => return Ok("value".to_string()),
            Value::Bool(false) => return Err(err(path, "the schema 'false' matches nothing")),
            Value::Object(o) => o,
            _ => return Err(err(path, "a schema must be an object or a boolean")),
        };
        for key in o.keys() {
            if UNSUPPORTED.contains(&key.as_str()) {
                return Err(err(path, format!("'{key}' is not supported")));
            }
        }
        if let Some(r) = o.get("$ref") {
            return self.reference(r, path);
        }
        if let Some(c) = o.get("const") {
            return Ok(json_lit(c));
        }
        if let Some(e) = o.get("enum") {
            let Value::Array(items) = e else {
                return Err(err(path, "'enum' must be an array"));
            };
            if items.is_empty() {
                return Err(err(path, "'enum' is empty"));
            }
            let alts: Vec<String> = items.iter().map(json_lit).collect();
            return Ok(format!("( {} )", alts.join(" | ")));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(v) = o.get(key) {
                let Value::Array(items) = v else {
                    return Err(err(path, format!("'{key}' must be an array")));
                };
                let mut alts = Vec::new();
                for (i, s) in items.iter().enumerate() {
                    alts.push(self.visit(s, &format!("{path}{key}/{i}/"), hint)?);
                }
                if alts.is_empty() {
                    return Err(err(path, format!("'{key}' is empty")));
                }
                return Ok(format!("( {} )", alts.join(" | ")));
            }
        }
        let types: Vec<&str> = match o.get("type") {
            None => {
                if o.contains_key("properties") {
                    vec!["object"]
                } else if o.contains_key("items") {
                    vec!["array"]
                } else {
                    return Ok("value".to_string());
                }
            }
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts
                .iter()
                .map(|t| {
                    t.as_str()
                        .ok_or_else(|| err(path, "'type' entries must be strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(err(path, "'type' must be a string or an array")),
        };
        let mut alts = Vec::new();
        for t in types {
            alts.push(self.typed(t, o, path, hint)?);
        }
        Ok(if alts.len() == 1 {
            alts.pop().unwrap_or_default()
        } else {
            format!("( {} )", alts.join(" | "))
        })
    }

    fn reference(&mut self, r: &'a Value, path: &str) -> Result<String, SchemaError> {
        let Some(target) = r.as_str() else {
            return Err(err(path, "'$ref' must be a string"));
        };
        if let Some(name) = self.refs.get(target) {
            return Ok(name.clone());
        }
        let Some(pointer) = target.strip_prefix('#') else {
            return Err(err(
                path,
                format!("only local references ('#/...') are supported, not '{target}'"),
            ));
        };
        let Some(schema) = self.root.pointer(pointer) else {
            return Err(err(
                path,
                format!("'$ref' target '{target}' does not exist"),
            ));
        };
        // Reserve the name first so that recursive references resolve to it.
        let hint = pointer.rsplit('/').next().unwrap_or("ref").to_string();
        let name = self.add(&hint, String::new());
        self.refs.insert(target.to_string(), name.clone());
        let body = self.visit(schema, &format!("{pointer}/"), &hint)?;
        if let Some(rule) = self.rules.iter_mut().find(|(n, _)| *n == name) {
            rule.1 = body;
        }
        Ok(name)
    }

    fn typed(
        &mut self,
        t: &str,
        o: &'a Map<String, Value>,
        path: &str,
        hint: &str,
    ) -> Result<String, SchemaError> {
        for key in o.keys() {
            if !KNOWN.contains(&key.as_str()) && !key.starts_with("x-") {
                return Err(err(path, format!("'{key}' is not supported")));
            }
        }
        match t {
            "string" => self.string(o, path, hint),
            "integer" => self.integer(o, path, hint),
            "number" => self.number(o, path, hint),
            "boolean" => Ok("boolean".to_string()),
            "null" => Ok("null".to_string()),
            "array" => self.array(o, path, hint),
            "object" => self.object(o, path, hint),
            other => Err(err(path, format!("unknown type '{other}'"))),
        }
    }

    fn string(
        &mut self,
        o: &Map<String, Value>,
        path: &str,
        hint: &str,
    ) -> Result<String, SchemaError> {
        if let Some(f) = o.get("format") {
            let f = f
                .as_str()
                .ok_or_else(|| err(path, "'format' must be a string"))?;
            return match f {
                "date" => Ok("date-string".to_string()),
                "time" => Ok("time-string".to_string()),
                "date-time" => Ok("date-time-string".to_string()),
                "uuid" => Ok("uuid-string".to_string()),
                "email" => Ok("email-string".to_string()),
                other => Err(err(
                    path,
                    format!("string format '{other}' is not supported"),
                )),
            };
        }
        let min = uint(o, "minLength", path)?;
        let max = uint(o, "maxLength", path)?;
        if min.is_none() && max.is_none() {
            return Ok("string".to_string());
        }
        let min = min.unwrap_or(0);
        if max.is_some_and(|m| m < min) {
            return Err(err(path, "'maxLength' is below 'minLength'"));
        }
        let reps = repetition(min, max);
        Ok(self.add(hint, format!("\"\\\"\" char{reps} \"\\\"\" space")))
    }

    fn integer(
        &mut self,
        o: &Map<String, Value>,
        path: &str,
        hint: &str,
    ) -> Result<String, SchemaError> {
        let (lo, hi) = int_bounds(o, path)?;
        if lo.is_none() && hi.is_none() {
            return Ok("integer".to_string());
        }
        if let (Some(l), Some(h)) = (lo, hi) {
            if l > h {
                return Err(err(path, "'minimum' is above 'maximum'"));
            }
        }
        let body = format!("{} space", int_range(lo, hi));
        Ok(self.add(hint, body))
    }

    fn number(
        &mut self,
        o: &Map<String, Value>,
        path: &str,
        hint: &str,
    ) -> Result<String, SchemaError> {
        if o.contains_key("exclusiveMinimum") || o.contains_key("exclusiveMaximum") {
            return Err(err(path, "exclusive bounds are supported on integers only"));
        }
        let bound = |key: &str| -> Result<Option<i64>, SchemaError> {
            match o.get(key) {
                None => Ok(None),
                Some(v) => match v.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => Ok(Some(f as i64)),
                    _ => Err(err(
                        path,
                        format!("'{key}' on a number must be an integer value here"),
                    )),
                },
            }
        };
        let (lo, hi) = (bound("minimum")?, bound("maximum")?);
        if lo.is_none() && hi.is_none() {
            return Ok("number".to_string());
        }
        if let (Some(l), Some(h)) = (lo, hi) {
            if l > h {
                return Err(err(path, "'minimum' is above 'maximum'"));
            }
        }
        // x in [lo, hi]: an integer part in range with any fraction, except that the fraction
        // must be zero at the top end, and a negative integer part's fraction makes the value
        // smaller, so a negative bottom end also takes only zero fractions.
        let frac = "(\".\" [0-9]{1,6})?";
        let zeros = "(\".\" \"0\"{1,6})?";
        let mut alts = Vec::new();
        // Integer parts strictly inside, where any fraction keeps the value in range.
        let inner_lo = lo.map(|l| if l < 0 { l + 1 } else { l });
        let inner_hi = hi.map(|h| if h >= 0 { h - 1 } else { h });
        let inner_ok = match (inner_lo, inner_hi) {
            (Some(a), Some(b)) => a <= b,
            _ => true,
        };
        if inner_ok {
            alts.push(format!("{} {frac}", int_range(inner_lo, inner_hi)));
        }
        if let Some(h) = hi {
            if h >= 0 {
                alts.push(format!("{} {zeros}", lit(&h.to_string())));
            }
        }
        if let Some(l) = lo {
            if l < 0 {
                alts.push(format!("{} {zeros}", lit(&l.to_string())));
            }
        }
        let body = format!("( {} ) space", alts.join(" | "));
        Ok(self.add(hint, body))
    }

    fn array(
        &mut self,
        o: &'a Map<String, Value>,
        path: &str,
        hint: &str,
    ) -> Result<String, SchemaError> {
        let item = match o.get("items") {
            None => "value".to_string(),
            Some(s) => self.visit(s, &format!("{path}items/"), &format!("{hint}-item"))?,
        };
        let min = uint(o, "minItems", path)?.unwrap_or(0);
        let max = uint(o, "maxItems", path)?;
        if max.is_some_and(|m| m < min) {
            return Err(err(path, "'maxItems' is below 'minItems'"));
        }
        let body = if max == Some(0) {
            "\"[\" space \"]\" space".to_string()
        } else {
            let rest = repetition(min.saturating_sub(1), max.map(|m| m - 1));
            let list = format!("{item} ( \",\" space {item} ){rest}");
            if min == 0 {
                format!("\"[\" space ( {list} )? \"]\" space")
            } else {
                format!("\"[\" space {list} \"]\" space")
            }
        };
        Ok(self.add(hint, body))
    }

    fn object(
        &mut self,
        o: &'a Map<String, Value>,
        path: &str,
        hint: &str,
    ) -> Result<String, SchemaError> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        let props = match o.get("properties") {
            None => EMPTY.get_or_init(Map::new),
            Some(Value::Object(p)) => p,
            Some(_) => return Err(err(path, "'properties' must be an object")),
        };
        let required: Vec<&str> = match o.get("required") {
            None => Vec::new(),
            Some(Value::Array(r)) => r
                .iter()
                .map(|v| {
                    v.as_str()
                        .ok_or_else(|| err(path, "'required' entries must be strings"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(err(path, "'required' must be an array")),
        };
        for r in &required {
            if !props.contains_key(*r) {
                return Err(err(
                    path,
                    format!("required property '{r}' is not in 'properties'"),
                ));
            }
        }
        if props.is_empty() {
            return Ok(match o.get("additionalProperties") {
                Some(Value::Bool(false)) => "\"{\" space \"}\" space".to_string(),
                _ => "object".to_string(),
            });
        }
        // Each property as `"name": value`.
        let mut kvs = Vec::new();
        for (name, s) in props {
            let v = self.visit(
                s,
                &format!("{path}properties/{name}/"),
                &format!("{hint}-{name}"),
            )?;
            let kv = self.add(
                &format!("{hint}-{name}-kv"),
                format!(
                    "{} space \":\" space {v}",
                    lit(&Value::String(name.clone()).to_string())
                ),
            );
            kvs.push((kv, required.contains(&name.as_str())));
        }
        // first_i: properties i.. with none written yet; next_i: with a comma needed first.
        let n = kvs.len();
        let mut first = vec![String::new(); n + 1];
        let mut next = vec![String::new(); n + 1];
        for i in (0..n).rev() {
            let (kv, req) = &kvs[i];
            let after = next[i + 1].clone();
            let nb = if *req {
                format!("\",\" space {kv} {after}")
            } else if after.is_empty() {
                format!("( \",\" space {kv} )?")
            } else {
                format!("( \",\" space {kv} {after} | {after} )")
            };
            next[i] = self.add(&format!("{hint}-rest"), nb);
            let fb = if *req {
                format!("{kv} {after}")
            } else if first[i + 1].is_empty() {
                format!("( {kv} {after} )?")
            } else {
                format!("( {kv} {after} | {} )", first[i + 1])
            };
            first[i] = self.add(&format!("{hint}-props"), fb);
        }
        Ok(self.add(hint, format!("\"{{\" space {} \"}}\" space", first[0])))
    }
}

/// Names the shared rules use: a schema-derived rule must not take them.
const RESERVED: &[&str] = &[
    "root",
    "space",
    "char",
    "string",
    "boolean",
    "null",
    "integer",
    "integral-part",
    "decimal-part",
    "number",
    "value",
    "object",
    "array",
    "hex",
    "date",
    "time",
    "date-string",
    "time-string",
    "date-time-string",
    "uuid-string",
    "email-string",
];

fn uint(o: &Map<String, Value>, key: &str, path: &str) -> Result<Option<u32>, SchemaError> {
    match o.get(key) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n <= 4096 => Ok(Some(n as u32)),
            Some(_) => Err(err(path, format!("'{key}' above 4096 is not supported"))),
            None => Err(err(path, format!("'{key}' must be a non-negative integer"))),
        },
    }
}

/// GBNF repetition suffix for `{min,max}`.
fn repetition(min: u32, max: Option<u32>) -> String {
    match max {
        None if min == 0 => "*".to_string(),
        None => format!("{{{min},}}"),
        Some(m) if m == min => format!("{{{min}}}"),
        Some(m) => format!("{{{min},{m}}}"),
    }
}

fn int_bounds(
    o: &Map<String, Value>,
    path: &str,
) -> Result<(Option<i64>, Option<i64>), SchemaError> {
    let get = |key: &str| -> Result<Option<f64>, SchemaError> {
        match o.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|f| f.abs() < 1e15)
                .map(Some)
                .ok_or_else(|| err(path, format!("'{key}' must be a number below 1e15"))),
        }
    };
    let mut lo = get("minimum")?.map(|f| f.ceil() as i64);
    let mut hi = get("maximum")?.map(|f| f.floor() as i64);
    if let Some(x) = get("exclusiveMinimum")? {
        let v = x.floor() as i64 + 1;
        lo = Some(lo.map_or(v, |l| l.max(v)));
    }
    if let Some(x) = get("exclusiveMaximum")? {
        let v = x.ceil() as i64 - 1;
        hi = Some(hi.map_or(v, |h| h.min(v)));
    }
    Ok((lo, hi))
}

/// A GBNF expression for the decimal integers in `[lo, hi]` (either end may be open).
fn int_range(lo: Option<i64>, hi: Option<i64>) -> String {
    let mut alts = Vec::new();
    // Negative part: -(range of magnitudes).
    let neg_lo_mag = match lo {
        None => None,
        Some(l) if l < 0 => Some(-l),
        Some(_) => Some(0),
    };
    let neg_hi = hi.map_or(-1, |h| h.min(-1));
    if lo.is_none_or(|l| l <= neg_hi) {
        // magnitudes in [|neg_hi|, |lo|] (open above when lo is None)
        let mags = uint_range(neg_hi.unsigned_abs(), neg_lo_mag.map(|m| m as u64));
        alts.push(format!("\"-\" {mags}"));
    }
    let pos_lo = lo.map_or(0, |l| l.max(0)) as u64;
    if hi.is_none_or(|h| h >= pos_lo as i64) {
        alts.push(uint_range(pos_lo, hi.map(|h| h as u64)));
    }
    format!("( {} )", alts.join(" | "))
}

/// Decimal naturals in `[lo, hi]` (open above when `hi` is None), without leading zeros.
fn uint_range(lo: u64, hi: Option<u64>) -> String {
    let lo_s = lo.to_string();
    let mut alts = Vec::new();
    let top_len = hi.map_or(lo_s.len(), |h| h.to_string().len());
    for len in lo_s.len()..=top_len {
        let a = if len == lo_s.len() {
            lo_s.clone()
        } else {
            format!("1{}", "0".repeat(len - 1))
        };
        let b = match hi {
            Some(h) if len == top_len => h.to_string(),
            _ => "9".repeat(len),
        };
        alts.push(same_len_range(a.as_bytes(), b.as_bytes()));
    }
    if hi.is_none() {
        // Any longer number.
        alts.push(format!("[1-9] [0-9]{{{},15}}", lo_s.len()));
    }
    format!("( {} )", alts.join(" | "))
}

/// Digit strings of one length between `a` and `b` inclusive (`a <= b`).
fn same_len_range(a: &[u8], b: &[u8]) -> String {
    if a.is_empty() {
        return String::new();
    }
    if a[0] == b[0] {
        let rest = same_len_range(&a[1..], &b[1..]);
        return format!("\"{}\" {rest}", a[0] as char)
            .trim_end()
            .to_string();
    }
    let n = a.len() - 1;
    let tail_any = if n == 0 {
        String::new()
    } else {
        format!(" [0-9]{{{n}}}")
    };
    if a[1..].iter().all(|&c| c == b'0') && b[1..].iter().all(|&c| c == b'9') {
        return format!("[{}-{}]{tail_any}", a[0] as char, b[0] as char);
    }
    let mut alts = Vec::new();
    let nines = vec![b'9'; n];
    let zeros = vec![b'0'; n];
    alts.push(
        format!("\"{}\" {}", a[0] as char, same_len_range(&a[1..], &nines))
            .trim_end()
            .to_string(),
    );
    if a[0] + 1 < b[0] {
        alts.push(format!(
            "[{}-{}]{tail_any}",
            (a[0] + 1) as char,
            (b[0] - 1) as char
        ));
    }
    alts.push(
        format!("\"{}\" {}", b[0] as char, same_len_range(&zeros, &b[1..]))
            .trim_end()
            .to_string(),
    );
    format!("( {} )", alts.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::super::{Grammar, Matcher};
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn accepts(schema: &Value, text: &str) -> bool {
        let g = to_gbnf(schema).unwrap();
        let grammar = Grammar::parse(&g).unwrap_or_else(|e| panic!("{e}\n{g}"));
        let mut m = Matcher::new(Arc::new(grammar));
        m.advance(text.as_bytes()) && m.can_end()
    }

    #[test]
    fn integer_ranges_are_exact() {
        for (lo, hi) in [
            (Some(-15), Some(27)),
            (Some(3), None),
            (None, Some(-4)),
            (Some(100), Some(1234)),
            (Some(0), Some(0)),
        ] {
            let schema = json!({"type": "integer", "minimum": lo, "maximum": hi});
            let schema = Value::Object(
                schema
                    .as_object()
                    .unwrap()
                    .iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            );
            for x in -1300i64..1300 {
                let inside = lo.is_none_or(|l| x >= l) && hi.is_none_or(|h| x <= h);
                assert_eq!(
                    accepts(&schema, &x.to_string()),
                    inside,
                    "{x} in {lo:?}..{hi:?}"
                );
            }
            assert!(!accepts(&schema, "007"));
        }
    }

    #[test]
    fn number_bounds() {
        let s = json!({"type": "number", "minimum": -2, "maximum": 3});
        for (t, ok) in [
            ("-2", true),
            ("-2.0", true),
            ("-2.5", false),
            ("-1.5", true),
            ("0.25", true),
            ("2.99", true),
            ("3", true),
            ("3.0", true),
            ("3.1", false),
            ("4", false),
        ] {
            assert_eq!(accepts(&s, t), ok, "{t}");
        }
    }

    #[test]
    fn objects_with_optional_properties() {
        let s = json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}}, "required": ["b"]});
        assert!(accepts(&s, r#"{"b": "x"}"#));
        assert!(accepts(&s, r#"{"a": 1, "b": "x", "c": true}"#));
        assert!(accepts(&s, r#"{"b":"x","c":false}"#));
        assert!(!accepts(&s, r#"{"a": 1}"#));
        assert!(!accepts(&s, r#"{"b": "x",}"#));
        assert!(!accepts(&s, r#"{"c": true, "b": "x"}"#));
    }

    #[test]
    fn arrays_strings_enums_formats() {
        let s = json!({"type": "array", "items": {"enum": ["x", 1, null]}, "minItems": 1, "maxItems": 2});
        assert!(accepts(&s, r#"["x", null]"#));
        assert!(!accepts(&s, "[]"));
        assert!(!accepts(&s, "[1, 1, 1]"));
        let s = json!({"type": "string", "minLength": 2, "maxLength": 3});
        assert!(accepts(&s, r#""ab""#) && accepts(&s, r#""a\nb""#));
        assert!(!accepts(&s, r#""a""#) && !accepts(&s, r#""abcd""#));
        let s = json!({"type": "string", "format": "uuid"});
        assert!(accepts(&s, r#""123e4567-e89b-12d3-a456-426614174000""#));
        assert!(!accepts(&s, r#""123e4567""#));
        let s = json!({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"});
        assert!(accepts(&s, r#"{"next": {"next": {}}}"#));
    }

    #[test]
    fn unsupported_keywords_are_errors() {
        let e = to_gbnf(
            &json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}}),
        )
        .unwrap_err();
        assert_eq!(e.path, "/properties/a/");
        assert!(e.problem.contains("pattern"), "{e}");
        assert!(to_gbnf(&json!({"type": "wat"})).is_err());
        assert!(to_gbnf(&json!({"$ref": "#/nope"})).is_err());
    }

    /// Found by fuzz/fuzz_targets/json_schema.rs: a reference back to the root with nothing
    /// matched in between gave a left-recursive grammar instead of an error about the schema.
    #[test]
    fn a_reference_loop_that_matches_nothing_is_refused() {
        for s in [
            json!({"$ref": "#"}),
            json!({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n["}}}}, "$ref": "#"}),
            json!({"anyOf": [{"$ref": "#"}, {"type": "null"}]}),
        ] {
            let e = to_gbnf(&s).unwrap_err();
            assert!(e.problem.contains("'$ref' leads back"), "{s}: {e}");
        }
    }
}
