//! GBNF parsing and compiling of arbitrary text, then matching arbitrary bytes against the
//! compiled grammar. The input is the grammar, a 0xFF byte, then the text to match.

#![no_main]

mod common;

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use llamafile::sampling::grammar::{Grammar, Matcher};

fuzz_target!(|data: &[u8]| {
    let (grammar, text) = match data.iter().position(|&b| b == 0xFF) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(grammar) = Grammar::parse(&String::from_utf8_lossy(grammar)) else {
        return;
    };
    let mut matcher = Matcher::new(Arc::new(grammar));
    let _ = matcher.accepts(text);
    let _ = matcher.advance(text);
    let _ = matcher.can_end();
});
