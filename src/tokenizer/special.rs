//! Splitting text around special tokens before tokenizing, as llama.cpp's
//! `tokenizer_st_partition`: each special token's text (longest first) cuts the remaining plain
//! text fragments wherever it occurs. User-defined tokens are always cut out; control and
//! unknown tokens only when the caller asks to parse specials.
//!
//! llama.cpp searches the text once per special token, which for Gemma's 6,414 specials is
//! 6,414 scans of every prompt. Here a byte trie of the specials' texts first finds, in one pass,
//! which specials occur at all (at most `longest special` steps per byte); only those cut, in
//! llama.cpp's order, so the fragments are the same and the work is the text's length times
//! the number of distinct specials in it, not times the vocabulary's specials.

use std::ops::Range;

use super::vocab::{attr, Vocab};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fragment {
    /// A byte range of the input holding plain text.
    Text(Range<usize>),
    Token(u32),
}

const NO_RANK: u32 = u32::MAX;

/// One trie node: its children by next byte (sorted), and the rank (position in the priority
/// order) of the special whose text ends here, if any.
#[derive(Clone, Debug)]
struct Node {
    children: Vec<(u8, u32)>,
    rank: u32,
}

/// The control, user-defined and unknown tokens in llama.cpp's priority order (longest text
/// first, then by id), with a trie of their texts.
#[derive(Clone, Debug)]
pub struct Specials {
    /// Token ids by rank.
    ids: Vec<u32>,
    /// `nodes[0]` is the root.
    nodes: Vec<Node>,
    /// The root's child for each first byte (0: none), so that most text bytes cost one lookup.
    first: Box<[u32; 256]>,
}

impl Specials {
    /// `ids` must be ordered as llama.cpp's special-token cache: longest text first.
    pub fn new(vocab: &Vocab, ids: Vec<u32>) -> Specials {
        let mut nodes = vec![Node {
            children: Vec::new(),
            rank: NO_RANK,
        }];
        for (rank, &id) in ids.iter().enumerate() {
            let Some(token) = vocab.token(id) else {
                continue;
            };
            let mut at = 0usize;
            for &b in token.text.as_bytes() {
                at = match nodes[at].children.binary_search_by_key(&b, |&(c, _)| c) {
                    Ok(i) => nodes[at].children[i].1 as usize,
                    Err(i) => {
                        let child = nodes.len();
                        nodes.push(Node {
                            children: Vec::new(),
                            rank: NO_RANK,
                        });
                        nodes[at].children.insert(i, (b, child as u32));
                        child
                    }
                };
            }
            // the root never ends a special: an empty text matches nowhere (as llama.cpp skips it)
            if at != 0 && nodes[at].rank == NO_RANK {
                nodes[at].rank = rank as u32;
            }
        }
        let mut first = Box::new([0u32; 256]);
        for &(b, child) in &nodes[0].children {
            first[b as usize] = child;
        }
        Specials { ids, nodes, first }
    }

    /// Which specials occur in `text` (by rank), and the trie steps it took to find out.
    fn present(&self, text: &str) -> (Vec<bool>, usize) {
        let bytes = text.as_bytes();
        let mut present = vec![false; self.ids.len()];
        let mut steps = 0;
        for start in 0..bytes.len() {
            let mut at = self.first[bytes[start] as usize];
            let mut next = start + 1;
            while at != 0 {
                steps += 1;
                let node = &self.nodes[at as usize];
                if node.rank != NO_RANK {
                    present[node.rank as usize] = true;
                }
                let Some(&b) = bytes.get(next) else {
                    break;
                };
                at = match node.children.binary_search_by_key(&b, |&(c, _)| c) {
                    Ok(i) => node.children[i].1,
                    Err(_) => 0,
                };
                next += 1;
            }
        }
        (present, steps)
    }
}

/// C's `isspace` in the "C" locale, which llama.cpp uses for the LSTRIP/RSTRIP attributes.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t'..=b'\r')
}

/// Cuts `text` into plain-text fragments and special tokens.
pub fn partition(
    vocab: &Vocab,
    specials: &Specials,
    text: &str,
    parse_special: bool,
) -> Vec<Fragment> {
    partition_counting(vocab, specials, text, parse_special).0
}

/// What [`partition`] does, with its work: trie steps, and the specials that cut (each one a
/// pass over the remaining text).
fn partition_counting(
    vocab: &Vocab,
    specials: &Specials,
    text: &str,
    parse_special: bool,
) -> (Vec<Fragment>, usize, usize) {
    let mut fragments = if text.is_empty() {
        Vec::new()
    } else {
        vec![Fragment::Text(0..text.len())]
    };
    let (present, steps) = specials.present(text);
    let mut passes = 0;
    for (&id, _) in specials.ids.iter().zip(&present).filter(|(_, &p)| p) {
        let Some(token) = vocab.token(id) else {
            continue;
        };
        if !parse_special && token.attr & (attr::CONTROL | attr::UNKNOWN) != 0 {
            continue;
        }
        passes += 1;
        let pattern: &str = &token.text;
        let mut next = Vec::with_capacity(fragments.len() + 2);
        for fragment in fragments {
            match fragment {
                Fragment::Token(_) => next.push(fragment),
                Fragment::Text(range) => cut(text, range, pattern, id, token.attr, &mut next),
            }
        }
        fragments = next;
    }
    (fragments, steps, passes)
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

    fn part(v: &Vocab, ids: &[u32], text: &str, parse_special: bool) -> Vec<Fragment> {
        partition(v, &Specials::new(v, ids.to_vec()), text, parse_special)
    }

    /// llama.cpp's algorithm as it stands: every special searched for in the whole text.
    fn partition_by_search(
        v: &Vocab,
        ids: &[u32],
        text: &str,
        parse_special: bool,
    ) -> Vec<Fragment> {
        let mut fragments = if text.is_empty() {
            Vec::new()
        } else {
            vec![Fragment::Text(0..text.len())]
        };
        for &id in ids {
            let token = v.token(id).unwrap();
            if !parse_special && token.attr & (attr::CONTROL | attr::UNKNOWN) != 0 {
                continue;
            }
            if token.text.is_empty() || !text.contains(&*token.text) {
                continue;
            }
            let mut next = Vec::new();
            for fragment in fragments {
                match fragment {
                    Fragment::Token(_) => next.push(fragment),
                    Fragment::Text(r) => cut(text, r, &token.text, id, token.attr, &mut next),
                }
            }
            fragments = next;
        }
        fragments
    }

    /// Specials that overlap, nest, share prefixes and strip spaces, in texts made of them and
    /// of filler: the trie's answer is always the one of searching for every special.
    #[test]
    fn same_fragments_as_searching_for_every_special() {
        let entries = [
            ("<|im_start|>", attr::CONTROL),
            ("<|im_end|>", attr::CONTROL | attr::RSTRIP),
            ("<tool>", attr::USER_DEFINED | attr::LSTRIP),
            ("<to", attr::USER_DEFINED),
            ("ol>", attr::USER_DEFINED),
            ("\n\n", attr::USER_DEFINED),
            ("\n", attr::USER_DEFINED),
            ("ab", attr::UNKNOWN),
            ("bc", attr::USER_DEFINED),
            ("é€", attr::CONTROL),
            ("", attr::USER_DEFINED),
        ];
        let v = vocab(&entries);
        let mut ids: Vec<u32> = (0..entries.len() as u32).collect();
        ids.sort_by_key(|&id| std::cmp::Reverse(v.token(id).unwrap().text.len()));
        let specials = Specials::new(&v, ids.clone());
        let pieces = [
            "<|im_start|>",
            "<|im_end|>",
            "<tool>",
            "<to",
            "ol>",
            "\n",
            "a",
            "b",
            "c",
            " ",
            "\t",
            "é",
            "€",
            "<",
            "|",
            "x",
        ];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..3000 {
            let mut text = String::new();
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            for _ in 0..state % 24 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                text.push_str(pieces[(state % pieces.len() as u64) as usize]);
            }
            for parse_special in [false, true] {
                assert_eq!(
                    partition(&v, &specials, &text, parse_special),
                    partition_by_search(&v, &ids, &text, parse_special),
                    "{text:?} (parse_special {parse_special})"
                );
            }
        }
    }

    /// Gemma's vocabulary has 6,414 specials: a prompt costs a pass per special that occurs in
    /// it, and trie steps bounded by its length times the longest special, however many
    /// specials the vocabulary has (searching for each one was 6,414 passes per prompt).
    #[test]
    fn work_depends_on_the_specials_in_the_text_not_in_the_vocabulary() {
        let texts: Vec<String> = (0..6000).map(|i| format!("<unused{i}>")).collect();
        let entries: Vec<(&str, u16)> = texts.iter().map(|t| (t.as_str(), attr::CONTROL)).collect();
        let v = vocab(&entries);
        let mut ids: Vec<u32> = (0..entries.len() as u32).collect();
        ids.sort_by_key(|&id| std::cmp::Reverse(v.token(id).unwrap().text.len()));
        let specials = Specials::new(&v, ids);
        let longest = texts.iter().map(String::len).max().unwrap();

        let plain = "Hello <unused world> <unused12 x".repeat(1000);
        let (fragments, steps, passes) = partition_counting(&v, &specials, &plain, true);
        assert_eq!(fragments, [Fragment::Text(0..plain.len())]);
        assert_eq!(passes, 0);
        assert!(steps <= plain.len() * longest, "{steps} trie steps");

        let some = "a<unused7>b<unused5999>c<unused7>".repeat(1000);
        let (fragments, steps, passes) = partition_counting(&v, &specials, &some, true);
        assert_eq!(fragments.len(), 6000);
        assert_eq!(fragments[1], Fragment::Token(7));
        assert_eq!(passes, 2);
        assert!(steps <= some.len() * longest, "{steps} trie steps");
        let (_, _, passes) = partition_counting(&v, &specials, &some, false);
        assert_eq!(
            passes, 0,
            "control tokens cut only when specials are parsed"
        );
    }

    #[test]
    fn control_tokens_only_with_parse_special() {
        let v = vocab(&[
            ("<|im_start|>", attr::CONTROL),
            ("<tool>", attr::USER_DEFINED),
            ("a", attr::NORMAL),
        ]);
        let text = "<|im_start|>x<tool>y<tool>";
        let parsed = part(&v, &[0, 1], text, true);
        use Fragment::*;
        assert_eq!(
            parsed,
            [Token(0), Text(12..13), Token(1), Text(19..20), Token(1)]
        );
        let plain = part(&v, &[0, 1], text, false);
        assert_eq!(plain, [Text(0..13), Token(1), Text(19..20), Token(1)]);
        assert!(part(&v, &[0, 1], "", true).is_empty());
    }

    #[test]
    fn longest_special_wins() {
        let v = vocab(&[("\n\n", attr::USER_DEFINED), ("\n", attr::USER_DEFINED)]);
        use Fragment::*;
        assert_eq!(
            part(&v, &[0, 1], "a\n\n\nb", false),
            [Text(0..1), Token(0), Token(1), Text(4..5)]
        );
    }

    #[test]
    fn strip_attributes_eat_ascii_spaces() {
        let v = vocab(&[("<mask>", attr::CONTROL | attr::LSTRIP | attr::RSTRIP)]);
        use Fragment::*;
        assert_eq!(
            part(&v, &[0], "a \x0b<mask>  b", true),
            [Text(0..1), Token(0), Text(11..12)]
        );
    }
}
