//! Splitting text around special tokens before tokenizing, as llama.cpp's
//! `tokenizer_st_partition`: each special token's text (longest first) cuts the remaining plain
//! text fragments wherever it occurs. User-defined tokens are always cut out; control and
//! unknown tokens only when the caller asks to parse specials.

use std::ops::Range;

use super::vocab::{attr, Vocab};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fragment {
    /// A byte range of the input holding plain text.
    Text(Range<usize>),
    Token(u32),
}

/// C's `isspace` in the "C" locale, which llama.cpp uses for the LSTRIP/RSTRIP attributes.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t'..=b'\r')
}

/// Cuts `text` into plain-text fragments and special tokens. `specials` must be ordered as
/// llama.cpp's special-token cache: longest text first.
pub fn partition(
    vocab: &Vocab,
    specials: &[u32],
    text: &str,
    parse_special: bool,
) -> Vec<Fragment> {
    let mut fragments = if text.is_empty() {
        Vec::new()
    } else {
        vec![Fragment::Text(0..text.len())]
    };
    for &id in specials {
        let Some(token) = vocab.token(id) else {
            continue;
        };
        if !parse_special && token.attr & (attr::CONTROL | attr::UNKNOWN) != 0 {
            continue;
        }
        let pattern: &str = &token.text;
        // a token absent from the whole text cannot occur in any fragment of it
        if pattern.is_empty() || !text.contains(pattern) {
            continue;
        }
        let mut next = Vec::with_capacity(fragments.len() + 2);
        for fragment in fragments {
            match fragment {
                Fragment::Token(_) => next.push(fragment),
                Fragment::Text(range) => cut(text, range, pattern, id, token.attr, &mut next),
            }
        }
        fragments = next;
    }
    fragments
}

/// Cuts every occurrence of `pattern` out of `text[range]`, left to right.
fn cut(
    text: &str,
    range: Range<usize>,
    pattern: &str,
    id: u32,
    attr: u16,
    out: &mut Vec<Fragment>,
) {
    let bytes = text.as_bytes();
    let (mut start, end) = (range.start, range.end);
    while start < end {
        let Some(found) = text[start..end].find(pattern) else {
            out.push(Fragment::Text(start..end));
            return;
        };
        let at = start + found;
        let mut left_end = at;
        if attr & attr::LSTRIP != 0 {
            while left_end > start && is_c_space(bytes[left_end - 1]) {
                left_end -= 1;
            }
        }
        if left_end > start {
            out.push(Fragment::Text(start..left_end));
        }
        out.push(Fragment::Token(id));
        start = at + pattern.len();
        if attr & attr::RSTRIP != 0 {
            while start < end && is_c_space(bytes[start]) {
                start += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::tokenizer::vocab::Token;

    fn vocab(entries: &[(&str, u16)]) -> Vocab {
        let tokens: Vec<Token> = entries
            .iter()
            .map(|&(t, a)| Token {
                text: t.into(),
                score: 0.0,
                attr: a,
            })
            .collect();
        let ids: HashMap<Box<str>, u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.text.clone(), i as u32))
            .collect();
        Vocab::new(tokens, ids)
    }

    #[test]
    fn control_tokens_only_with_parse_special() {
        let v = vocab(&[
            ("<|im_start|>", attr::CONTROL),
            ("<tool>", attr::USER_DEFINED),
            ("a", attr::NORMAL),
        ]);
        let text = "<|im_start|>x<tool>y<tool>";
        let parsed = partition(&v, &[0, 1], text, true);
        use Fragment::*;
        assert_eq!(
            parsed,
            [Token(0), Text(12..13), Token(1), Text(19..20), Token(1)]
        );
        let plain = partition(&v, &[0, 1], text, false);
        assert_eq!(plain, [Text(0..13), Token(1), Text(19..20), Token(1)]);
        assert!(partition(&v, &[0, 1], "", true).is_empty());
    }

    #[test]
    fn longest_special_wins() {
        let v = vocab(&[("\n\n", attr::USER_DEFINED), ("\n", attr::USER_DEFINED)]);
        use Fragment::*;
        assert_eq!(
            partition(&v, &[0, 1], "a\n\n\nb", false),
            [Text(0..1), Token(0), Token(1), Text(4..5)]
        );
    }

    #[test]
    fn strip_attributes_eat_ascii_spaces() {
        let v = vocab(&[("<mask>", attr::CONTROL | attr::LSTRIP | attr::RSTRIP)]);
        use Fragment::*;
        assert_eq!(
            partition(&v, &[0], "a \x0b<mask>  b", true),
            [Text(0..1), Token(0), Text(11..12)]
        );
    }
}
