//! JSON schema to grammar on arbitrary JSON. Oracle: every grammar the converter produces parses
//! and compiles (a schema it cannot express must be refused, not turned into a broken grammar).

#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use llamafile::sampling::grammar::json_schema::to_gbnf;
use llamafile::sampling::grammar::{Grammar, Matcher};

fuzz_target!(|data: &[u8]| {
    let Ok(schema) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(gbnf) = to_gbnf(&schema) else {
        return;
    };
    let grammar = Grammar::parse(&gbnf)
        .unwrap_or_else(|e| panic!("the grammar made from {schema} does not parse: {e}\n{gbnf}"));
    let mut matcher = Matcher::new(Arc::new(grammar));
    let _ = matcher.accepts(b"{\"a\": [1, 2.5e3, \"x\", null, true]}");
});
