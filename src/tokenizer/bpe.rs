//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`): pre-tokenize, map each word's bytes to
//! GPT-2's printable characters, then merge adjacent symbols by merge rank, as llama.cpp's
//! `llm_tokenizer_bpe_session` does (lowest rank first, leftmost first among equal ranks).
//!
//! Owns the merge table; does not handle special tokens (see `special`).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::pretokenize::PreConfig;
use super::unicode::byte_to_char;
use super::vocab::Vocab;

#[derive(Clone, Debug)]
pub struct Bpe {
    /// `"left right"` → rank (the merge's index in `tokenizer.ggml.merges`; first one wins).
    ranks: HashMap<Box<str>, u32>,
    pre: PreConfig,
}

const NONE: usize = usize::MAX;

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

#[derive(PartialEq, Eq)]
struct Bigram {
    rank: u32,
    left: usize,
    right: usize,
    len: usize,
}

impl Ord for Bigram {
    /// The heap's greatest element is the lowest rank, then the leftmost.
    fn cmp(&self, other: &Self) -> Ordering {
        other.rank.cmp(&self.rank).then(other.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Bpe {
    pub fn new(merges: &[String], pre: PreConfig) -> Bpe {
        let mut ranks = HashMap::with_capacity(merges.len());
        for (rank, merge) in merges.iter().enumerate() {
            // llama.cpp splits at the first space after the first byte; entries without one
            // can never match a pair of non-empty symbols
            if merge
                .as_bytes()
                .get(1..)
                .is_some_and(|rest| rest.contains(&b' '))
            {
                ranks.entry(merge.as_str().into()).or_insert(rank as u32);
            }
        }
        Bpe { ranks, pre }
    }

    pub fn pre(&self) -> PreConfig {
        self.pre
    }

    /// Appends the tokens of `text` (plain text, no special tokens) to `out`.
    pub fn tokenize(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let mut session = Session {
            bpe: self,
            key: String::new(),
            heap: BinaryHeap::new(),
            symbols: Vec::new(),
        };
        let mut encoded = String::new();
        for word in self.pre.splitter.split(text) {
            encoded.clear();
            encoded.extend(word.bytes().map(byte_to_char));
            if self.pre.ignore_merges {
                if let Some(id) = vocab.id(&encoded) {
                    out.push(id);
                    continue;
                }
            }
            session.merge(&encoded);
            for sym in session.symbols.iter().filter(|s| s.len > 0) {
                let piece = &encoded[sym.start..sym.start + sym.len];
                match vocab.id(piece) {
                    Some(id) => out.push(id),
                    // llama.cpp then looks up each byte of the piece as a one-byte token
                    None => out.extend(piece.bytes().filter(u8::is_ascii).filter_map(|b| {
                        let byte = [b];
                        std::str::from_utf8(&byte).ok().and_then(|s| vocab.id(s))
                    })),
                }
            }
        }
    }
}

struct Session<'a> {
    bpe: &'a Bpe,
    key: String,
    heap: BinaryHeap<Bigram>,
    symbols: Vec<Symbol>,
}

impl Session<'_> {
    /// Leaves in `self.symbols` the merged symbols of `word` (those with `len > 0`, in order).
    fn merge(&mut self, word: &str) {
        self.heap.clear();
        self.symbols.clear();
        for (i, (start, ch)) in word.char_indices().enumerate() {
            let next = if start + ch.len_utf8() == word.len() {
                NONE
            } else {
                i + 1
            };
            let prev = if i == 0 { NONE } else { i - 1 };
            self.symbols.push(Symbol {
                start,
                len: ch.len_utf8(),
                prev,
                next,
            });
        }
        for i in 1..self.symbols.len() {
            self.add_bigram(word, i - 1, i);
        }
        while let Some(bigram) = self.heap.pop() {
            let (left, right) = (self.symbols[bigram.left], self.symbols[bigram.right]);
            if left.len == 0 || right.len == 0 || left.len + right.len != bigram.len {
                continue; // outdated: one side was merged since
            }
            self.symbols[bigram.left].len += right.len;
            self.symbols[bigram.left].next = right.next;
            self.symbols[bigram.right].len = 0;
            if right.next != NONE {
                self.symbols[right.next].prev = bigram.left;
            }
            self.add_bigram(word, left.prev, bigram.left);
            self.add_bigram(word, bigram.left, right.next);
        }
    }

    fn add_bigram(&mut self, word: &str, left: usize, right: usize) {
        if left == NONE || right == NONE {
            return;
        }
        let (l, r) = (self.symbols[left], self.symbols[right]);
        self.key.clear();
        self.key.push_str(&word[l.start..l.start + l.len]);
        self.key.push(' ');
        self.key.push_str(&word[r.start..r.start + r.len]);
        if let Some(&rank) = self.bpe.ranks.get(self.key.as_str()) {
            self.heap.push(Bigram {
                rank,
                left,
                right,
                len: l.len + r.len,
            });
        }
    }
}
