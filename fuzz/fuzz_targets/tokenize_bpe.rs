//! Byte-level BPE tokenization (SmolLM2's vocabulary and pre-tokenizer) of arbitrary text, with
//! and without special-token parsing. Oracle: without special tokens, the pieces of the tokens
//! spell the input exactly, less the bytes the vocabulary has no token for (SmolLM2 lacks 21 of
//! the 256, and llama.cpp drops such bytes too).

#![no_main]

mod common;

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use llamafile::tokenizer::Tokenizer;

static TOKENIZER: LazyLock<Tokenizer> =
    LazyLock::new(|| common::tokenizer("SmolLM2-135M-Instruct.Q4_1"));

/// Which bytes have a token of their own: byte-level BPE spells byte `b` as one character, the
/// printable Latin-1 ones as themselves and the rest as U+0100 onwards, in byte order.
static SPELLABLE: LazyLock<[bool; 256]> = LazyLock::new(|| {
    let printable = |b: u32| {
        (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
    };
    let mut spellable = [false; 256];
    let mut next_unprintable = 0x100;
    for b in 0..256u32 {
        let c = if printable(b) {
            b
        } else {
            next_unprintable += 1;
            next_unprintable - 1
        };
        let text = char::from_u32(c).expect("a valid scalar").to_string();
        spellable[b as usize] = TOKENIZER.token_id(&text).is_some();
    }
    spellable
});

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let tok = &*TOKENIZER;
    let ids = tok.encode(&text, false, false);
    let spelled: Vec<u8> = ids
        .iter()
        .flat_map(|&id| tok.token_to_piece(id, true).to_vec())
        .collect();
    let expected: Vec<u8> = text.bytes().filter(|&b| SPELLABLE[b as usize]).collect();
    if spelled != expected {
        let at = spelled
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(spelled.len().min(expected.len()));
        let near = |b: &[u8]| {
            String::from_utf8_lossy(&b[at.saturating_sub(20)..(at + 20).min(b.len())]).into_owned()
        };
        panic!(
            "BPE tokens do not spell their input from byte {at}: input {:?}, tokens {:?}",
            near(&expected),
            near(&spelled)
        );
    }
    for id in tok.encode(&text, true, true) {
        assert!((id as usize) < tok.n_vocab());
    }
});
