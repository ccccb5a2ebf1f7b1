//! Grammar-constrained generation on SmolLM2: every grammar in tests/data/grammars parses, and
//! what the model writes under it is accepted by an independent checker (serde_json, a small
//! recursive-descent parser, regular expressions); JSON schemas give JSON that Python's
//! `jsonschema` validates; bad grammars and schemas are one-line CLI errors naming the place.

mod common;

use fancy_regex::Regex;
use llamafile::engine::{load_model, Loaded};
use llamafile::engine::{Session, StopReason};
use llamafile::sampling::grammar::json_schema;
use llamafile::sampling::{Grammar, Sampler, SamplingParams, TokenVocab};
use serde_json::{json, Value};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Arc;

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1";

fn grammar_file(name: &str) -> String {
    let p = format!("{}/tests/data/grammars/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// Generates from `prompt` (with the chat template's user turn) under `grammar`.
fn generate(
    m: &Loaded,
    prompt: &str,
    grammar: Grammar,
    temp: f32,
    seed: u64,
    n: i64,
) -> (String, StopReason) {
    let text = format!("<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n");
    let tokens = m.tokenizer.encode(&text, true, true);
    let mut session = Session::new(&m.model, 2048, 512);
    let logits = session.feed(&tokens, false).unwrap();
    let params = SamplingParams {
        temperature: temp,
        seed,
        grammar: Some(Arc::new(grammar)),
        ..Default::default()
    };
    let mut sampler = Sampler::new(params, Arc::new(TokenVocab::new(&m.tokenizer)));
    let mut out = Vec::new();
    let reason = session
        .generate(
            logits,
            &mut sampler,
            n,
            |id| m.tokenizer.is_eog(id),
            |ev| {
                if !ev.is_eog {
                    out.extend_from_slice(m.tokenizer.token_to_piece(ev.id, false));
                }
                true
            },
        )
        .unwrap();
    (
        String::from_utf8(out).expect("grammar output is UTF-8"),
        reason,
    )
}

fn model() -> Option<Loaded> {
    let p = common::model_path(SMOLLM2)?;
    Some(load_model(p.to_str().unwrap(), None).unwrap())
}

/// An arithmetic expression as tests/data/grammars/arithmetic.gbnf defines it, checked by
/// recursive descent.
fn arithmetic_ok(s: &str) -> bool {
    fn expr(b: &[u8], i: &mut usize) -> bool {
        term(b, i) && {
            while *i < b.len() && (b[*i] == b'+' || b[*i] == b'-') {
                *i += 1;
                if !term(b, i) {
                    return false;
                }
            }
            true
        }
    }
    fn term(b: &[u8], i: &mut usize) -> bool {
        factor(b, i) && {
            while *i < b.len() && (b[*i] == b'*' || b[*i] == b'/') {
                *i += 1;
                if !factor(b, i) {
                    return false;
                }
            }
            true
        }
    }
    fn factor(b: &[u8], i: &mut usize) -> bool {
        if b.get(*i) == Some(&b'(') {
            *i += 1;
            return expr(b, i) && b.get(*i) == Some(&b')') && {
                *i += 1;
                true
            };
        }
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        (1..=4).contains(&(*i - start))
    }
    let Some((lhs, rhs)) = s.rsplit_once(" = ") else {
        return false;
    };
    let mut i = 0;
    let b = lhs.as_bytes();
    expr(b, &mut i)
        && i == b.len()
        && Regex::new(r"^-?[0-9]{1,6}$")
            .unwrap()
            .is_match(rhs)
            .unwrap()
}

/// An independent judge of a grammar's output.
type Checker = Box<dyn Fn(&str) -> bool>;

#[test]
fn generation_under_each_grammar_is_accepted() {
    let Some(m) = model() else { return };
    let cases: Vec<(&str, &str, Checker)> = vec![
        (
            "json.gbnf",
            "Describe a cat as a JSON object with its name and age.",
            Box::new(|s: &str| serde_json::from_str::<Value>(s).is_ok_and(|v| v.is_object())),
        ),
        (
            "arithmetic.gbnf",
            "What is 12 plus 30?",
            Box::new(arithmetic_ok),
        ),
        (
            "list.gbnf",
            "List three fruits.",
            Box::new(|s: &str| {
                Regex::new(r"^(- [^\n]{1,60}\n){1,5}$")
                    .unwrap()
                    .is_match(s)
                    .unwrap()
            }),
        ),
        (
            "chess.gbnf",
            "Write the first moves of a chess game.",
            Box::new(|s: &str| {
                let mv = r"(O-O(-O)?[+#]?|[KQRBN][a-h]?[1-8]?x?[a-h][1-8][+#]?|([a-h]x)?[a-h][1-8](=[QRBN])?[+#]?)";
                let turn = format!("{mv} {mv}");
                Regex::new(&format!(r"^1\. {turn}( [2-9]\. {turn}){{0,3}}$"))
                    .unwrap()
                    .is_match(s)
                    .unwrap()
            }),
        ),
    ];
    for (file, prompt, check) in &cases {
        let text = grammar_file(file);
        for (temp, seed) in [(0.0, 0), (0.7, 1)] {
            let g = Grammar::parse(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
            let (out, reason) = generate(&m, prompt, g, temp, seed, 400);
            assert_eq!(
                reason,
                StopReason::EndOfGeneration,
                "{file} temp {temp}: did not finish: {out:?}"
            );
            assert!(
                check(&out),
                "{file} temp {temp}: the checker rejects {out:?}"
            );
        }
    }
}

#[test]
fn a_grammar_that_cannot_finish_stops_at_the_token_limit() {
    let Some(m) = model() else { return };
    let g = Grammar::parse("root ::= [a-z]{400}").unwrap();
    let (out, reason) = generate(&m, "Say hi.", g, 0.8, 3, 8);
    assert_eq!(reason, StopReason::Length);
    assert!(
        out.bytes().all(|b| b.is_ascii_lowercase()) && !out.is_empty(),
        "{out:?}"
    );
}

/// Ten schemas: nested objects, arrays with bounds, enums, const, required and optional
/// properties, string lengths and formats, integer and number bounds.
fn schemas() -> Vec<(&'static str, Value)> {
    vec![
        (
            "A person.",
            json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"]}),
        ),
        (
            "A colour.",
            json!({"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}}, "required": ["colour"]}),
        ),
        (
            "Three numbers.",
            json!({"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "minItems": 3, "maxItems": 3}),
        ),
        (
            "A book.",
            json!({"type": "object", "properties": {"title": {"type": "string", "minLength": 1, "maxLength": 30}, "author": {"type": "object", "properties": {"first": {"type": "string", "maxLength": 15}, "last": {"type": "string", "maxLength": 15}}, "required": ["last"]}, "year": {"type": "integer", "minimum": 1450, "maximum": 2025}}, "required": ["title", "author"]}),
        ),
        (
            "An event.",
            json!({"type": "object", "properties": {"date": {"type": "string", "format": "date"}, "time": {"type": "string", "format": "time"}, "id": {"type": "string", "format": "uuid"}}, "required": ["date", "id"]}),
        ),
        (
            "A contact.",
            json!({"type": "object", "properties": {"email": {"type": "string", "format": "email"}, "vip": {"type": "boolean"}}, "required": ["email", "vip"]}),
        ),
        (
            "A measurement.",
            json!({"type": "object", "properties": {"value": {"type": "number", "minimum": 0, "maximum": 100}, "unit": {"const": "cm"}}, "required": ["value", "unit"]}),
        ),
        (
            "A shopping list.",
            json!({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "qty": {"type": "integer", "minimum": 1, "maximum": 99}}, "required": ["name", "qty"]}, "minItems": 1, "maxItems": 3}}, "required": ["items"]}),
        ),
        (
            "A yes or no answer.",
            json!({"anyOf": [{"type": "boolean"}, {"type": "null"}]}),
        ),
        (
            "A tree.",
            // (Properties are written in the schema's order, as llama.cpp writes them: with `label`
            // first, SmolLM2's greedy tree never closes within the token budget.)
            json!({"$defs": {"node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}, "label": {"type": "string", "maxLength": 10}}, "required": ["label"]}}, "$ref": "#/$defs/node"}),
        ),
    ]
}

/// Validates `(schema, document)` pairs with Python's `jsonschema` (formats checked by
/// regular expressions in Python, since its format checkers need extra packages); returns
/// None when Python or the package is missing and models are not required.
fn python_validate(pairs: &[(Value, String)]) -> Option<Vec<String>> {
    const SCRIPT: &str = r#"
import json, re, sys
import jsonschema
FORMATS = {"date": r"^\d{4}-\d{2}-\d{2}$", "time": r"^\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$",
           "uuid": r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$", "email": r"^[^@\s]+@[^@\s]+\.[^@\s]+$"}
checker = jsonschema.FormatChecker(formats=())
for name, rx in FORMATS.items():
    checker.checks(name)(lambda v, rx=rx: not isinstance(v, str) or re.match(rx, v) is not None)
for schema, doc in json.load(sys.stdin):
    try:
        jsonschema.validate(json.loads(doc), schema, format_checker=checker)
        print("ok")
    except Exception as e:
        print(("invalid: " + str(e)).replace("\n", " ")[:300])
"#;
    let child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return skip(&format!("python3: {e}")),
    };
    let input =
        serde_json::to_vec(&pairs.iter().map(|(s, d)| json!([s, d])).collect::<Vec<_>>()).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    if !out.status.success() {
        return skip(&format!(
            "python3 jsonschema: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect(),
    )
}

fn skip(why: &str) -> Option<Vec<String>> {
    if std::env::var("LLAMAFILE_REQUIRE_MODELS").as_deref() == Ok("1") {
        panic!("{why} (pip install jsonschema)");
    }
    eprintln!("skipping schema validation: {why}");
    None
}

#[test]
fn json_schema_outputs_validate() {
    let Some(m) = model() else { return };
    let mut pairs = Vec::new();
    for (prompt, schema) in schemas() {
        let gbnf = json_schema::to_gbnf(&schema).unwrap_or_else(|e| panic!("{schema}: {e}"));
        for (temp, seed) in [(0.0, 0), (0.9, 5)] {
            let g = Grammar::parse(&gbnf).unwrap_or_else(|e| panic!("{e}\n{gbnf}"));
            let (out, reason) =
                generate(&m, &format!("{prompt} Answer in JSON."), g, temp, seed, 300);
            assert_eq!(
                reason,
                StopReason::EndOfGeneration,
                "{schema}: did not finish: {out:?}"
            );
            serde_json::from_str::<Value>(&out)
                .unwrap_or_else(|e| panic!("{schema}: {out:?}: {e}"));
            pairs.push((schema.clone(), out));
        }
    }
    let Some(verdicts) = python_validate(&pairs) else {
        return;
    };
    assert_eq!(verdicts.len(), pairs.len());
    for ((schema, doc), v) in pairs.iter().zip(&verdicts) {
        assert_eq!(v, "ok", "{schema}\n{doc}");
    }
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_llamafile"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn bad_grammars_and_schemas_are_one_line_errors() {
    let Some(p) = common::model_path(SMOLLM2) else {
        return;
    };
    let model = p.to_str().unwrap();
    let cases = [
        (
            vec!["--grammar", "root ::= \"a\" bogus"],
            "--grammar: line 1, column 14: undefined rule 'bogus'",
        ),
        (
            vec!["--grammar", "root ::= [a-z"],
            "unterminated character class in rule 'root'",
        ),
        (
            vec!["--grammar", "root ::= x\nx ::= x \"a\""],
            "rule 'x' is left-recursive",
        ),
        (vec!["--grammar", "top ::= \"a\""], "no 'root' rule"),
        (
            vec![
                "--json-schema",
                "{\"type\": \"string\", \"pattern\": \"^a\"}",
            ],
            "--json-schema: at /: 'pattern' is not supported",
        ),
        (
            vec!["--json-schema", "{nope"],
            "--json-schema: not valid JSON",
        ),
        (
            vec!["--samplers", "top_k;wat"],
            "--samplers: unknown sampler 'wat'",
        ),
        (
            vec!["--logit-bias", "12x"],
            "--logit-bias 12x: expected TOKEN_ID(+/-)BIAS",
        ),
    ];
    for (args, expected) in cases {
        let mut all = vec!["-m", model, "-p", "hi", "-n", "4"];
        all.extend(args.iter().copied());
        let out = cli(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: one line: {err}"
        );
    }
    // A good grammar on the command line constrains the output.
    let out = cli(&[
        "-m",
        model,
        "-p",
        "Count:",
        "-n",
        "12",
        "--temp",
        "0",
        "--grammar",
        "root ::= [0-9]{1,3} (\",\" [0-9]{1,3}){0,3}",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    // -n 12 may cut it short: then it is a prefix ending after a digit or a comma.
    assert!(
        Regex::new(r"^[0-9]{1,3}(,[0-9]{1,3}){0,3},?$")
            .unwrap()
            .is_match(&text)
            .unwrap(),
        "{text:?}"
    );
}

/// A grammar whose parse stacks double at every byte (each `r` leaves a `p` or a `q` pending,
/// and nothing ever ends `r`): after 12 letters any next byte needs more than the matcher's
/// 4,096 stacks, so generation ends there, and stderr says it was the bound, not the grammar.
/// A grammar that simply finishes says nothing of the kind.
#[test]
fn a_generation_ended_by_the_stack_bound_says_so() {
    let Some(p) = common::model_path(SMOLLM2) else {
        return;
    };
    let model = p.to_str().unwrap();
    let run = |grammar: &str| {
        let out = cli(&[
            "-m",
            model,
            "-p",
            "hi",
            "-n",
            "32",
            "--temp",
            "0",
            "--grammar",
            grammar,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let doubling = "root ::= r\nr ::= [a-z] r p | [a-z] r q\np ::= [a-z]\nq ::= [a-z]";
    let (text, err) = run(doubling);
    assert!(
        !text.is_empty() && text.len() <= 13 && text.bytes().all(|b| b.is_ascii_lowercase()),
        "{text:?}"
    );
    assert!(err.contains("too ambiguous to follow"), "{err}");
    let (text, err) = run("root ::= [a-z]{3}");
    assert_eq!(text.len(), 3, "{text:?}");
    assert!(!err.contains("too ambiguous"), "{err}");
}
