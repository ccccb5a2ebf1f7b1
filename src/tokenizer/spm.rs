//! SentencePiece-style tokenization (`tokenizer.ggml.model = "llama"`), as llama.cpp's
//! `llm_tokenizer_spm_session`: start from single characters and repeatedly merge the adjacent
//! pair whose concatenation is the highest-scoring token (leftmost first among equal scores);
//! characters that end up in no token fall back to `<0xXX>` byte tokens.
//!
//! Expects text whose spaces are already escaped as `▁`; owns no special-token handling.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::vocab::Vocab;

const NONE: usize = usize::MAX;

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Bigram {}

impl Ord for Bigram {
    /// The heap's greatest element is the highest score, then the leftmost. Scores compare as
    /// C++ floats do (`-0.0 == 0.0`); vocabularies carry no NaN scores.
    fn cmp(&self, other: &Self) -> Ordering {
        let by_score = self
            .score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal);
        by_score.then(other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Appends the tokens of the escaped `text` to `out`. `byte_tokens[b]` is the token for byte
/// `b` (`<0xXX>`, else the one-character token), or the unknown token when there is neither.
pub fn tokenize(vocab: &Vocab, byte_tokens: &[Option<u32>; 256], text: &str, out: &mut Vec<u32>) {
    let mut symbols: Vec<Symbol> = Vec::with_capacity(text.len());
    for (i, (start, ch)) in text.char_indices().enumerate() {
        let next = if start + ch.len_utf8() == text.len() {
            NONE
        } else {
            i + 1
        };
        let prev = if i == 0 { NONE } else { i - 1 };
        symbols.push(Symbol {
            start,
            len: ch.len_utf8(),
            prev,
            next,
        });
    }
    let mut heap = BinaryHeap::new();
    let add_bigram =
        |heap: &mut BinaryHeap<Bigram>, symbols: &[Symbol], left: usize, right: usize| {
            if left == NONE || right == NONE {
                return;
            }
            let (l, r) = (symbols[left], symbols[right]);
            let len = l.len + r.len;
            if let Some(id) = vocab.id(&text[l.start..l.start + len]) {
                let score = vocab.token(id).map_or(0.0, |t| t.score);
                heap.push(Bigram {
                    score,
                    left,
                    right,
                    len,
                });
            }
        };
    for i in 1..symbols.len() {
        add_bigram(&mut heap, &symbols, i - 1, i);
    }
    while let Some(bigram) = heap.pop() {
        let (left, right) = (symbols[bigram.left], symbols[bigram.right]);
        if left.len == 0 || right.len == 0 || left.len + right.len != bigram.len {
            continue; // outdated: one side was merged since
        }
        symbols[bigram.left].len += right.len;
        symbols[bigram.left].next = right.next;
        symbols[bigram.right].len = 0;
        if right.next != NONE {
            symbols[right.next].prev = bigram.left;
        }
        add_bigram(&mut heap, &symbols, left.prev, bigram.left);
        add_bigram(&mut heap, &symbols, bigram.left, right.next);
    }
    // Every merged symbol is a token by construction; only single characters can miss.
    let mut i = if symbols.is_empty() { NONE } else { 0 };
    while i != NONE {
        let sym = symbols[i];
        let piece = &text[sym.start..sym.start + sym.len];
        match vocab.id(piece) {
            Some(id) => out.push(id),
            None => out.extend(piece.bytes().filter_map(|b| byte_tokens[b as usize])),
        }
        i = sym.next;
    }
}
