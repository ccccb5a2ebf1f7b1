//! Following a grammar byte by byte. The parser state is a set of stacks of positions in the
//! grammar (llama.cpp's representation): the top of each stack is the byte set to match next,
//! the entries below are where to continue when the current rule ends; an empty stack means the
//! grammar may end here.
//!
//! Stacks are persistent linked lists whose nodes are hash-consed, and stack sets are interned,
//! so the same state always has the same id. Transitions `(set, byte) -> set` are cached in a
//! dense table: after warm-up, following a byte is one array lookup, which is what makes
//! walking the whole vocabulary trie per token cheap.

use super::compile::{Elem, Grammar};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::Arc;

/// No parent: the bottom of a stack. As a member of a set: the empty (finished) stack.
const NIL: u32 = u32::MAX;
/// The empty set of stacks: nothing can follow.
pub const DEAD: u32 = 0;
/// A transition not computed yet.
const UNKNOWN: u32 = u32::MAX;
/// A transition refused because following it needed more than `MAX_STACKS` (answered as DEAD,
/// remembered apart so that a cached refusal still reports its reason).
const REFUSED_FOR_BOUND: u32 = u32::MAX - 1;
/// Interned sets beyond which the caches are rebuilt from the current state.
const MAX_SETS: usize = 1 << 14;
/// The most stacks one state may have. A real grammar keeps a few dozen alive; one that is
/// ambiguous enough (a value allowed inside every string character, say) can multiply them at
/// every byte, millions within a hundred bytes and seconds per byte: past this bound the byte is
/// refused as if the grammar had no way to continue, which ends a generation there.
pub const MAX_STACKS: usize = 1 << 12;

/// The state of one generation under a grammar.
#[derive(Clone)]
pub struct Matcher {
    g: Arc<Grammar>,
    /// Stack nodes: (position in `g.elems`, parent node or NIL).
    nodes: Vec<(u32, u32)>,
    node_ids: HashMap<(u32, u32), u32>,
    /// Interned stack sets (sorted node ids; NIL for the empty stack). Set 0 is empty.
    sets: Vec<Box<[u32]>>,
    set_ids: HashMap<Box<[u32]>, u32>,
    trans: Vec<[u32; 256]>,
    /// The stack set after the text accepted so far.
    current: u32,
    /// Whether some byte was refused because following it needed more than `MAX_STACKS`,
    /// since the last [`Matcher::clear_stack_limit_hit`].
    stack_limit_hit: bool,
    /// `expand`'s record of the pairs expanded in one step, kept between steps for its
    /// allocation.
    seen: HashSet<(u32, u32)>,
}

impl std::fmt::Debug for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matcher")
            .field("stacks", &self.sets[self.current as usize].len())
            .finish()
    }
}

impl Matcher {
    /// The state before any text: every way to start `root`.
    pub fn new(g: Arc<Grammar>) -> Matcher {
        let mut m = Matcher {
            g,
            nodes: Vec::new(),
            node_ids: HashMap::default(),
            sets: Vec::new(),
            set_ids: HashMap::default(),
            trans: Vec::new(),
            current: DEAD,
            stack_limit_hit: false,
            seen: HashSet::default(),
        };
        m.intern_set(Vec::new());
        m.current = m.start_set();
        m
    }

    fn start_set(&mut self) -> u32 {
        let mut out = Vec::new();
        let mut seen = HashSet::default();
        let root = self.g.root as usize;
        for i in 0..self.g.rules[root].alts.len() {
            let alt = self.g.rules[root].alts[i];
            self.expand(alt, NIL, &mut out, &mut seen);
        }
        self.intern_set(out)
    }

    fn node(&mut self, pos: u32, parent: u32) -> u32 {
        if let Some(&id) = self.node_ids.get(&(pos, parent)) {
            return id;
        }
        let id = self.nodes.len() as u32;
        self.nodes.push((pos, parent));
        self.node_ids.insert((pos, parent), id);
        id
    }

    fn intern_set(&mut self, mut stacks: Vec<u32>) -> u32 {
        stacks.sort_unstable();
        stacks.dedup();
        let key = stacks.into_boxed_slice();
        if let Some(&id) = self.set_ids.get(&key) {
            return id;
        }
        let id = self.sets.len() as u32;
        self.sets.push(key.clone());
        self.set_ids.insert(key, id);
        self.trans.push([UNKNOWN; 256]);
        id
    }

    /// Pushes onto `out` the normalised stacks (top is a byte set, or the empty stack) for
    /// "match from `pos`, then continue with `parent`". Iterative, so that deeply nested
    /// grammars cannot exhaust the thread's stack. `seen` holds the (position, parent) pairs
    /// already expanded in this step: each is expanded once, so grammars with many ways to
    /// match nothing (`("" | "" | x){0,48}`) cost time linear in the stacks they reach, not
    /// exponential in the ways of reaching them.
    fn expand(
        &mut self,
        pos: u32,
        parent: u32,
        out: &mut Vec<u32>,
        seen: &mut HashSet<(u32, u32)>,
    ) {
        let mut work = vec![(pos, parent)];
        while let Some((pos, parent)) = work.pop() {
            if !seen.insert((pos, parent)) {
                continue;
            }
            match self.g.elems[pos as usize] {
                Elem::End => {
                    if parent == NIL {
                        out.push(NIL);
                    } else {
                        work.push(self.nodes[parent as usize]);
                    }
                }
                Elem::Bytes(_) => out.push(self.node(pos, parent)),
                Elem::Rule(r) => {
                    // Tail call: nothing after the reference, so continue straight with `parent`.
                    let cont = if self.g.elems[pos as usize + 1] == Elem::End {
                        parent
                    } else {
                        self.node(pos + 1, parent)
                    };
                    for &alt in self.g.rules[r as usize].alts.iter().rev() {
                        work.push((alt, cont));
                    }
                }
            }
        }
    }

    /// The set reached from `set` by byte `b` (DEAD when `b` cannot come next).
    #[inline]
    pub fn step(&mut self, set: u32, b: u8) -> u32 {
        let t = self.trans[set as usize][b as usize];
        if t < REFUSED_FOR_BOUND {
            return t;
        }
        if t == REFUSED_FOR_BOUND {
            self.stack_limit_hit = true;
            return DEAD;
        }
        let mut seen = std::mem::take(&mut self.seen);
        seen.clear();
        let next = self.follow(set, b, &mut seen);
        // Kept for the next step unless one step made it large (clearing costs its capacity).
        if seen.capacity() <= 4 * MAX_STACKS {
            self.seen = seen;
        }
        self.trans[set as usize][b as usize] = next;
        if next == REFUSED_FOR_BOUND {
            self.stack_limit_hit = true;
            return DEAD;
        }
        next
    }

    /// The set reached from `set` by byte `b`, computed; REFUSED_FOR_BOUND past `MAX_STACKS`.
    fn follow(&mut self, set: u32, b: u8, seen: &mut HashSet<(u32, u32)>) -> u32 {
        let mut out = Vec::new();
        for i in 0..self.sets[set as usize].len() {
            let s = self.sets[set as usize][i];
            if s == NIL {
                continue;
            }
            let (pos, parent) = self.nodes[s as usize];
            if let Elem::Bytes(bs) = self.g.elems[pos as usize] {
                if bs.contains(b) {
                    self.expand(pos + 1, parent, &mut out, seen);
                    if out.len() > MAX_STACKS {
                        return REFUSED_FOR_BOUND;
                    }
                }
            }
        }
        self.intern_set(out)
    }

    /// Whether a byte has been refused since the last [`Matcher::clear_stack_limit_hit`] only
    /// because the grammar was too ambiguous there (more than `MAX_STACKS` parse stacks), not
    /// because the grammar forbids it: cleared before masking the vocabulary, the reason to give
    /// when that mask allows nothing. A refusal read from the transition cache counts too.
    pub fn stack_limit_hit(&self) -> bool {
        self.stack_limit_hit
    }

    /// Forgets earlier refusals for the bound (see [`Matcher::stack_limit_hit`]).
    pub fn clear_stack_limit_hit(&mut self) {
        self.stack_limit_hit = false;
    }

    /// The current state's id.
    pub fn current(&self) -> u32 {
        self.current
    }

    /// Whether the text so far is a complete sentence of the grammar.
    pub fn can_end(&self) -> bool {
        self.sets[self.current as usize].contains(&NIL)
    }

    /// Whether nothing at all may follow (the grammar is finished, or the text is invalid).
    pub fn is_finished(&self) -> bool {
        self.sets[self.current as usize].iter().all(|&s| s == NIL)
    }

    /// Whether `bytes` can follow the text so far (leaving a valid prefix).
    pub fn accepts(&mut self, bytes: &[u8]) -> bool {
        let mut s = self.current;
        for &b in bytes {
            s = self.step(s, b);
            if s == DEAD {
                return false;
            }
        }
        true
    }

    /// Moves past `bytes`; returns false (and changes nothing) when they cannot follow.
    pub fn advance(&mut self, bytes: &[u8]) -> bool {
        let mut s = self.current;
        for &b in bytes {
            s = self.step(s, b);
            if s == DEAD {
                return false;
            }
        }
        self.current = s;
        if self.sets.len() > MAX_SETS {
            self.compact();
        }
        true
    }

    /// Forgets every cached state but the current one (bounds memory on long generations).
    fn compact(&mut self) {
        let stacks: Vec<Vec<u32>> = self.sets[self.current as usize]
            .iter()
            .map(|&s| {
                let mut positions = Vec::new();
                let mut n = s;
                while n != NIL {
                    positions.push(self.nodes[n as usize].0);
                    n = self.nodes[n as usize].1;
                }
                positions
            })
            .collect();
        self.nodes.clear();
        self.node_ids.clear();
        self.sets.clear();
        self.set_ids.clear();
        self.trans.clear();
        self.intern_set(Vec::new());
        let mut ids = Vec::new();
        for positions in stacks {
            let mut parent = NIL;
            for &pos in positions.iter().rev() {
                parent = self.node(pos, parent);
            }
            ids.push(parent);
        }
        self.current = self.intern_set(ids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts_all(g: &str, text: &str) -> (bool, bool) {
        let mut m = Matcher::new(Arc::new(Grammar::parse(g).unwrap()));
        let ok = m.advance(text.as_bytes());
        (ok, m.can_end())
    }

    #[test]
    fn follows_bytes_and_knows_when_it_can_end() {
        let g = r#"root ::= "ab" [0-9]+ ("x" | "yz")?"#;
        assert_eq!(accepts_all(g, "ab"), (true, false));
        assert_eq!(accepts_all(g, "ab12"), (true, true));
        assert_eq!(accepts_all(g, "ab12y"), (true, false));
        assert_eq!(accepts_all(g, "ab12yz"), (true, true));
        assert!(!accepts_all(g, "ab12yzx").0);
        assert!(!accepts_all(g, "b").0);
    }

    /// Found by fuzz/fuzz_targets/gbnf.rs: a repetition of a group with many empty
    /// alternatives reached the same stacks along exponentially many paths, and following one
    /// byte ran for minutes and out of memory. A grammar comes with any server request.
    #[test]
    fn many_ways_to_match_nothing_cost_linear_time() {
        let g = r#"root ::= ( "a" | "" | "" | "" | "" | "" | "" | "" | "" | "" ){0,48} "b""#;
        assert_eq!(accepts_all(g, "aab"), (true, true));
        assert_eq!(accepts_all(g, "b"), (true, true));
        assert!(!accepts_all(g, "ac").0);
        // Refused because the grammar forbids it, not for the bound.
        let mut m = Matcher::new(Arc::new(Grammar::parse(g).unwrap()));
        assert!(!m.accepts(b"ac"));
        assert!(!m.stack_limit_hit());
    }

    /// Found by fuzz/fuzz_targets/gbnf.rs: JSON's grammar with a `value` allowed after every
    /// string character. The stacks multiplied at nearly every byte (3 million after 110 bytes,
    /// seconds per byte and rising); now a state never holds more than `MAX_STACKS`, and the
    /// text is refused where the bound is reached.
    #[test]
    fn an_ambiguous_grammar_cannot_multiply_stacks_without_bound() {
        let input = include_bytes!("../../../tests/data/fuzz/gbnf-stack-explosion");
        let at = input.iter().position(|&b| b == 0xFF).unwrap();
        let g = Grammar::parse(&String::from_utf8_lossy(&input[..at])).unwrap();
        let mut m = Matcher::new(Arc::new(g));
        let text = &input[at + 1..];
        let mut s = m.current();
        let mut refused_at = None;
        for (i, &b) in text.iter().enumerate() {
            s = m.step(s, b);
            assert!(m.sets[s as usize].len() <= MAX_STACKS);
            if s == DEAD {
                refused_at = Some(i);
                break;
            }
        }
        assert!(refused_at.is_some_and(|i| i < 110), "{refused_at:?}");
        assert!(m.stack_limit_hit());
        // The refusal is cached, and still reports its reason when read from the cache.
        let (before, byte) = (
            state_before_refusal(&mut m, text),
            text[refused_at.unwrap()],
        );
        m.clear_stack_limit_hit();
        assert_eq!(m.step(before, byte), DEAD);
        assert!(m.stack_limit_hit());
    }

    /// The state after the longest prefix of `text` the matcher follows.
    fn state_before_refusal(m: &mut Matcher, text: &[u8]) -> u32 {
        let mut s = m.current();
        for &b in text {
            let next = m.step(s, b);
            if next == DEAD {
                break;
            }
            s = next;
        }
        s
    }

    #[test]
    fn unicode_classes_match_utf8_bytes() {
        let g = r#"root ::= [^a]{2} "é""#;
        assert_eq!(accepts_all(g, "€bé"), (true, true));
        assert!(!accepts_all(g, "ab").0);
        // A partial UTF-8 sequence is a valid prefix.
        let mut m = Matcher::new(Arc::new(Grammar::parse(g).unwrap()));
        assert!(m.advance(&[0xE2, 0x82]));
        assert!(!m.accepts(b"x"));
    }

    #[test]
    fn repetition_bounds() {
        let g = r#"root ::= "a"{2,3}"#;
        assert_eq!(accepts_all(g, "a"), (true, false));
        assert_eq!(accepts_all(g, "aa"), (true, true));
        assert_eq!(accepts_all(g, "aaa"), (true, true));
        assert!(!accepts_all(g, "aaaa").0);
    }

    #[test]
    fn states_repeat_in_loops() {
        let mut m = Matcher::new(Arc::new(
            Grammar::parse(r#"root ::= "[" [a-z]* "]""#).unwrap(),
        ));
        assert!(m.advance(b"[a"));
        let s = m.current();
        assert!(m.advance(b"bcd"));
        assert_eq!(
            m.current(),
            s,
            "a loop must come back to the same interned state"
        );
    }

    #[test]
    fn compact_keeps_the_state() {
        let mut m = Matcher::new(Arc::new(
            Grammar::parse(r#"root ::= "(" [a-z]* ")""#).unwrap(),
        ));
        assert!(m.advance(b"(ab"));
        m.compact();
        assert!(!m.can_end());
        assert!(m.advance(b"c)"));
        assert!(m.can_end());
    }
}
