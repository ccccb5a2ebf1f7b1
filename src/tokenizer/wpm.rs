//! WordPiece (`tokenizer.ggml.model = "bert"`, llama.cpp's WPM vocabulary type), as llama.cpp
//! tokenizes it: the text is normalised (each codepoint mapped to the first codepoint of its NFD
//! form and combining marks dropped when accents are stripped, control characters dropped,
//! lowercased when asked), split on whitespace and around punctuation, ASCII symbols and CJK
//! ideographs, and each word, prefixed with `▁`, is cut greedily into the longest vocabulary
//! pieces. llama.cpp's converter stores a word-initial piece as `▁piece` and a continuation
//! (`##piece` in the Hugging Face vocabulary) as `piece`. A word that cannot be cut whole is
//! one `[UNK]`.
//!
//! Owns the splitting and the greedy match only; `[CLS]` and `[SEP]` are added by the caller
//! ([`super::Tokenizer::encode`]).

use super::unicode::Flags;
use super::vocab::Vocab;
use unicode_normalization::UnicodeNormalization;

/// The normaliser's options (`tokenizer.ggml.normalizer.*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Normalizer {
    pub lowercase: bool,
    pub strip_accents: bool,
}

/// Appends the tokens of `text` (no special tokens) to `out`. `max_len` is the longest token's
/// length in bytes.
pub fn tokenize(
    vocab: &Vocab,
    norm: Normalizer,
    unk: Option<u32>,
    max_len: usize,
    text: &str,
    out: &mut Vec<u32>,
) {
    for word in words(text, norm) {
        let word = format!("\u{2581}{word}");
        let n = word.len();
        let start = out.len();
        let mut i = 0;
        while i < n {
            let found = (i + 1..=n.min(i + max_len + 1))
                .rev()
                .find_map(|j| Some((j, vocab.id(word.get(i..j)?)?)));
            match found {
                Some((j, id)) => {
                    out.push(id);
                    i = j;
                }
                None => {
                    out.truncate(start);
                    break;
                }
            }
        }
        if out.len() == start {
            out.extend(unk);
        }
    }
}

/// The words of `text` after normalisation, as llama.cpp's WPM pre-processing splits them.
fn words(text: &str, norm: Normalizer) -> Vec<String> {
    let mut words = vec![String::new()];
    for c in text.chars() {
        let c = if norm.strip_accents {
            std::iter::once(c).nfd().next().unwrap_or(c)
        } else {
            c
        };
        let flags = Flags::of(c);
        if flags.is_whitespace() {
            if !words.last().is_some_and(String::is_empty) {
                words.push(String::new());
            }
            continue;
        }
        if c == '\0' || c == '\u{FFFD}' || flags.is_control() {
            continue;
        }
        if norm.strip_accents && flags.is_accent_mark() {
            continue;
        }
        let c = if norm.lowercase { to_lower(c) } else { c };
        let last = words.last_mut().expect("never empty");
        if flags.is_punctuation() || ((c as u32) < 0x7F && flags.is_symbol()) || is_cjk(c) {
            if last.is_empty() {
                last.push(c);
            } else {
                words.push(c.to_string());
            }
            words.push(String::new());
        } else {
            last.push(c);
        }
    }
    if words.last().is_some_and(String::is_empty) {
        words.pop();
    }
    words
}

/// The simple (one codepoint) lowercase mapping of Unicode's data, as llama.cpp's table has it.
fn to_lower(c: char) -> char {
    let mut it = c.to_lowercase();
    match (it.next(), it.next()) {
        (Some(l), None) => l,
        // U+0130 (İ) is the one letter whose full mapping has two codepoints; its simple one is i.
        _ if c == '\u{130}' => 'i',
        _ => c,
    }
}

/// The CJK ideograph blocks BERT splits one character at a time (as llama.cpp lists them).
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: Normalizer = Normalizer {
        lowercase: true,
        strip_accents: true,
    };

    #[test]
    fn splits_punctuation_and_strips_accents() {
        assert_eq!(
            words("Héllo,  WORLD!\tcafé's 東京", BOTH),
            ["hello", ",", "world", "!", "cafe", "'", "s", "東", "京"]
        );
        let keep = Normalizer {
            lowercase: false,
            strip_accents: false,
        };
        assert_eq!(words("Héllo $5", keep), ["Héllo", "$", "5"]);
    }
}
