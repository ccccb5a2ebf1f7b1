//! SentencePiece tokenization (Gemma 3's vocabulary, byte fallback) of arbitrary text, with and
//! without special-token parsing. Every id is in the vocabulary and every piece decodes.

#![no_main]

mod common;

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use llamafile::tokenizer::Tokenizer;

static TOKENIZER: LazyLock<Tokenizer> = LazyLock::new(|| common::tokenizer("gemma-3-270m-q4_k_m"));

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let tok = &*TOKENIZER;
    for (add, parse) in [(false, false), (true, true)] {
        for id in tok.encode(&text, add, parse) {
            assert!((id as usize) < tok.n_vocab());
            let _ = tok.token_to_piece(id, true);
        }
    }
});
