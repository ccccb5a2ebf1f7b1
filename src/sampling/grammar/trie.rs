//! The vocabulary as a prefix tree of token byte strings, laid out in depth-first order so
//! that a mask is one linear pass that jumps over every subtree whose prefix the grammar
//! rejects.

use super::matcher::{Matcher, DEAD};

#[derive(Clone, Copy, Debug)]
struct Node {
    byte: u8,
    depth: u32,
    /// One past the last node of this subtree.
    end: u32,
    /// Tokens whose bytes end here: `token_ids[tok_start..tok_end]`.
    tok_start: u32,
    tok_end: u32,
}

/// Every non-empty token piece in a prefix tree.
#[derive(Clone, Debug)]
pub struct TokenTrie {
    nodes: Vec<Node>,
    token_ids: Vec<u32>,
    max_depth: usize,
}

impl TokenTrie {
    /// Builds the tree from each token's bytes (`pieces[id]`); empty pieces are left out.
    pub fn new(pieces: &[Box<[u8]>]) -> TokenTrie {
        let mut order: Vec<u32> = (0..pieces.len() as u32)
            .filter(|&i| !pieces[i as usize].is_empty())
            .collect();
        order.sort_by(|&a, &b| pieces[a as usize].cmp(&pieces[b as usize]).then(a.cmp(&b)));
        let root = Node {
            byte: 0,
            depth: 0,
            end: 0,
            tok_start: 0,
            tok_end: 0,
        };
        let mut nodes = vec![root];
        let mut token_ids = Vec::with_capacity(order.len());
        // Node index of each byte on the current path (path[0] is the root).
        let mut path: Vec<usize> = vec![0];
        let mut prev: &[u8] = &[];
        for &id in &order {
            let piece: &[u8] = &pieces[id as usize];
            let common = prev.iter().zip(piece).take_while(|(a, b)| a == b).count();
            while path.len() > common + 1 {
                let n = path.pop().expect("path is not empty");
                nodes[n].end = nodes.len() as u32;
            }
            for (d, &b) in piece.iter().enumerate().skip(common) {
                nodes.push(Node {
                    byte: b,
                    depth: d as u32 + 1,
                    end: 0,
                    tok_start: 0,
                    tok_end: 0,
                });
                path.push(nodes.len() - 1);
            }
            let last = *path.last().expect("path is not empty");
            if nodes[last].tok_end == nodes[last].tok_start {
                nodes[last].tok_start = token_ids.len() as u32;
            }
            token_ids.push(id);
            nodes[last].tok_end = token_ids.len() as u32;
            prev = piece;
        }
        let total = nodes.len() as u32;
        for n in path {
            nodes[n].end = total;
        }
        let max_depth = nodes.iter().map(|n| n.depth as usize).max().unwrap_or(0);
        TokenTrie {
            nodes,
            token_ids,
            max_depth,
        }
    }

    /// Number of nodes (for diagnostics).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the tree holds no token.
    pub fn is_empty(&self) -> bool {
        self.token_ids.is_empty()
    }

    /// Calls `allow(id)` for every token whose bytes can follow the matcher's current text.
    pub fn allowed(&self, m: &mut Matcher, mut allow: impl FnMut(u32)) {
        let mut states = vec![DEAD; self.max_depth + 1];
        states[0] = m.current();
        let mut i = 1;
        while i < self.nodes.len() {
            let n = self.nodes[i];
            let s = m.step(states[n.depth as usize - 1], n.byte);
            if s == DEAD {
                i = n.end as usize;
                continue;
            }
            states[n.depth as usize] = s;
            for &id in &self.token_ids[n.tok_start as usize..n.tok_end as usize] {
                allow(id);
            }
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Grammar;
    use super::*;
    use std::sync::Arc;

    #[test]
    fn allows_exactly_the_tokens_that_fit() {
        let words = ["a", "ab", "abc", "b", "", "ba", "c", "ab"];
        let pieces: Vec<Box<[u8]>> = words.iter().map(|w| w.as_bytes().into()).collect();
        let trie = TokenTrie::new(&pieces);
        let mut m = Matcher::new(Arc::new(
            Grammar::parse(r#"root ::= "a" "b"* "c""#).unwrap(),
        ));
        let mut got = Vec::new();
        trie.allowed(&mut m, |id| got.push(id));
        got.sort();
        assert_eq!(got, vec![0, 1, 2, 7]);
        assert!(m.advance(b"ab"));
        let mut got = Vec::new();
        trie.allowed(&mut m, |id| got.push(id));
        got.sort();
        assert_eq!(got, vec![3, 6]);
    }
}
