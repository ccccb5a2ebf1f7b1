//! The compiled form of a grammar: every alternative of every rule laid out in one flat array of
//! elements, each alternative ending with [`Elem::End`], so that a parse position is a single
//! index. Terminals are sets of bytes: a character class becomes the UTF-8 byte sequences of its
//! ranges (a synthetic rule when a class needs more than one byte per character).

use super::parse::{self, GrammarError};
use std::collections::HashMap;

/// The most rules (including those made for groups and repetitions) a grammar may have.
const MAX_RULES: usize = 1 << 15;

/// A set of bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ByteSet(pub [u64; 4]);

impl ByteSet {
    pub fn single(b: u8) -> ByteSet {
        let mut s = ByteSet::default();
        s.insert(b);
        s
    }

    pub fn range(lo: u8, hi: u8) -> ByteSet {
        let mut s = ByteSet::default();
        for b in lo..=hi {
            s.insert(b);
        }
        s
    }

    pub fn insert(&mut self, b: u8) {
        self.0[(b >> 6) as usize] |= 1 << (b & 63);
    }

    #[inline]
    pub fn contains(&self, b: u8) -> bool {
        self.0[(b >> 6) as usize] >> (b & 63) & 1 == 1
    }

    pub fn union(&self, o: &ByteSet) -> ByteSet {
        let mut r = *self;
        for i in 0..4 {
            r.0[i] |= o.0[i];
        }
        r
    }

    pub fn is_empty(&self) -> bool {
        self.0 == [0; 4]
    }
}

impl std::fmt::Debug for ByteSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes: Vec<u8> = (0..=255u8).filter(|&b| self.contains(b)).collect();
        write!(f, "{:?}", String::from_utf8_lossy(&bytes))
    }
}

/// One element of an alternative.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    /// Matches one byte of the set.
    Bytes(ByteSet),
    /// Matches the rule with this index.
    Rule(u32),
    /// Ends the alternative.
    End,
}

/// A rule: its name and where each of its alternatives starts in [`Grammar::elems`].
#[derive(Clone, Debug)]
pub struct Rule {
    pub name: String,
    pub alts: Vec<u32>,
}

/// A compiled grammar.
#[derive(Clone, Debug)]
pub struct Grammar {
    pub elems: Vec<Elem>,
    pub rules: Vec<Rule>,
    pub root: u32,
}

/// One item of a parsed sequence, before lowering.
#[derive(Clone, Debug)]
pub(super) enum Item {
    Bytes(ByteSet),
    /// Characters as inclusive code point ranges (already negated where `[^...]`).
    Class(Vec<(u32, u32)>),
    Ref(u32),
}

/// Builds the flat grammar while the parser finds rules, creating synthetic rules for groups,
/// repetitions and multi-byte character classes.
#[derive(Default)]
pub(super) struct Builder {
    pub names: HashMap<String, u32>,
    /// Alternatives of each rule (None: referenced, not yet defined) and where it was first
    /// referenced (byte offset), for errors.
    pub defs: Vec<Option<Vec<Vec<Item>>>>,
    pub rule_names: Vec<String>,
    pub first_use: Vec<usize>,
    class_rules: HashMap<Vec<(u32, u32)>, u32>,
}

impl Builder {
    /// The id of rule `name`, creating an undefined entry on first sight.
    pub fn rule_id(&mut self, name: &str, at: usize) -> u32 {
        if let Some(&id) = self.names.get(name) {
            return id;
        }
        let id = self.defs.len() as u32;
        self.names.insert(name.to_string(), id);
        self.defs.push(None);
        self.rule_names.push(name.to_string());
        self.first_use.push(at);
        id
    }

    /// A new anonymous rule with these alternatives, named after `base`.
    pub fn synthetic(&mut self, base: &str, alts: Vec<Vec<Item>>) -> u32 {
        let id = self.defs.len() as u32;
        let name = format!("{base}_{id}");
        self.names.insert(name.clone(), id);
        self.defs.push(Some(alts));
        self.rule_names.push(name);
        self.first_use.push(0);
        id
    }

    /// Lowers a character class to items: one byte set when every character is one byte,
    /// otherwise a rule whose alternatives are the UTF-8 byte sequences.
    fn lower_class(&mut self, ranges: &[(u32, u32)]) -> Item {
        if let Some(&id) = self.class_rules.get(ranges) {
            return Item::Ref(id);
        }
        let mut single = ByteSet::default();
        let mut multi: Vec<Vec<Item>> = Vec::new();
        for &(lo, hi) in ranges {
            let (Some(lo), Some(hi)) = (char::from_u32(lo), char::from_u32(hi)) else {
                continue;
            };
            for seq in regex_syntax::utf8::Utf8Sequences::new(lo, hi) {
                let parts = seq.as_slice();
                if parts.len() == 1 {
                    single = single.union(&ByteSet::range(parts[0].start, parts[0].end));
                } else {
                    multi.push(
                        parts
                            .iter()
                            .map(|r| Item::Bytes(ByteSet::range(r.start, r.end)))
                            .collect(),
                    );
                }
            }
        }
        if multi.is_empty() {
            return Item::Bytes(single);
        }
        if !single.is_empty() {
            multi.insert(0, vec![Item::Bytes(single)]);
        }
        let id = self.synthetic("char", multi);
        self.class_rules.insert(ranges.to_vec(), id);
        Item::Ref(id)
    }

    /// Checks every rule is defined, `root` exists and no rule is left-recursive, then lays
    /// the rules out flat.
    pub fn finish(mut self, text: &str) -> Result<Grammar, GrammarError> {
        for (id, def) in self.defs.iter().enumerate() {
            if def.is_none() {
                return Err(parse::error_at(
                    text,
                    self.first_use[id],
                    format!("undefined rule '{}'", self.rule_names[id]),
                ));
            }
        }
        let root = *self
            .names
            .get("root")
            .ok_or_else(|| GrammarError::new("the grammar has no 'root' rule".to_string()))?;
        // Lower character classes (this may add rules, so loop by index).
        let mut r = 0;
        while r < self.defs.len() {
            let mut alts = self.defs[r].take().unwrap_or_default();
            for alt in alts.iter_mut() {
                for item in alt.iter_mut() {
                    if let Item::Class(ranges) = item {
                        let ranges = ranges.clone();
                        *item = self.lower_class(&ranges);
                    }
                }
            }
            self.defs[r] = Some(alts);
            r += 1;
        }
        if self.defs.len() > MAX_RULES {
            return Err(GrammarError::new(format!(
                "the grammar has {} rules (after expanding repetitions), more than {MAX_RULES}",
                self.defs.len()
            )));
        }
        let defs: Vec<Vec<Vec<Item>>> = self
            .defs
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect();
        check_left_recursion(&defs, &self.rule_names)?;
        let mut elems = Vec::new();
        let mut rules = Vec::with_capacity(defs.len());
        for (id, alts) in defs.iter().enumerate() {
            let mut starts = Vec::with_capacity(alts.len());
            for alt in alts {
                starts.push(elems.len() as u32);
                for item in alt {
                    elems.push(match item {
                        Item::Bytes(b) => Elem::Bytes(*b),
                        Item::Ref(r) => Elem::Rule(*r),
                        Item::Class(_) => unreachable!("classes are lowered above"),
                    });
                }
                elems.push(Elem::End);
            }
            rules.push(Rule {
                name: self.rule_names[id].clone(),
                alts: starts,
            });
        }
        Ok(Grammar { elems, rules, root })
    }
}

/// Which rules can match the empty string, and the work it took (item visits and updates).
///
/// A worklist: each alternative counts its references to rules not yet known nullable (an
/// alternative with a byte item never is); a rule becomes nullable when one of its alternatives
/// reaches zero, which updates the alternatives that refer to it. Each item is visited a
/// bounded number of times, so the work is linear in the grammar's size (sweeping every rule
/// until nothing changes was quadratic: one sweep per link of a chain of rules written in
/// reverse order).
fn nullable_rules(defs: &[Vec<Vec<Item>>]) -> (Vec<bool>, usize) {
    let n = defs.len();
    let mut nullable = vec![false; n];
    let mut work = 0usize;
    // For each rule, the (rule, alternative) pairs that refer to it, once per reference.
    let mut users: Vec<Vec<(u32, u32)>> = vec![Vec::new(); n];
    // For each alternative, the references still to become nullable (None: it has a byte item).
    let mut pending: Vec<Vec<Option<usize>>> = Vec::with_capacity(n);
    let mut ready = Vec::new();
    for (r, alts) in defs.iter().enumerate() {
        let mut counts = Vec::with_capacity(alts.len());
        for (a, alt) in alts.iter().enumerate() {
            work += alt.len();
            let count = if alt.iter().all(|it| matches!(it, Item::Ref(_))) {
                for it in alt {
                    if let Item::Ref(x) = it {
                        users[*x as usize].push((r as u32, a as u32));
                    }
                }
                Some(alt.len())
            } else {
                None
            };
            if count == Some(0) && !nullable[r] {
                nullable[r] = true;
                ready.push(r);
            }
            counts.push(count);
        }
        pending.push(counts);
    }
    while let Some(x) = ready.pop() {
        for &(r, a) in &users[x] {
            work += 1;
            let count = pending[r as usize][a as usize]
                .as_mut()
                .expect("only all-reference alternatives are users");
            *count -= 1;
            if *count == 0 && !nullable[r as usize] {
                nullable[r as usize] = true;
                ready.push(r as usize);
            }
        }
    }
    (nullable, work)
}

/// Rejects grammars where a rule can reach itself without consuming a byte (the matcher would
/// expand it forever), as llama.cpp does.
fn check_left_recursion(defs: &[Vec<Vec<Item>>], names: &[String]) -> Result<(), GrammarError> {
    let n = defs.len();
    let nullable = nullable_rules(defs).0;
    // Edges: rules that can be the first thing a rule matches.
    let edges: Vec<Vec<usize>> = defs
        .iter()
        .map(|alts| {
            let mut out = Vec::new();
            for alt in alts {
                for it in alt {
                    match it {
                        Item::Ref(x) => {
                            out.push(*x as usize);
                            if !nullable[*x as usize] {
                                break;
                            }
                        }
                        _ => break,
                    }
                }
            }
            out
        })
        .collect();
    // Iterative DFS with colours.
    let mut colour = vec![0u8; n];
    for start in 0..n {
        if colour[start] != 0 {
            continue;
        }
        let mut stack = vec![(start, 0usize)];
        colour[start] = 1;
        while let Some(&mut (r, ref mut next)) = stack.last_mut() {
            if *next < edges[r].len() {
                let to = edges[r][*next];
                *next += 1;
                match colour[to] {
                    0 => {
                        colour[to] = 1;
                        stack.push((to, 0));
                    }
                    1 => {
                        return Err(GrammarError::new(format!(
                            "rule '{}' is left-recursive (it can reach itself without matching a character)",
                            names[to]
                        )))
                    }
                    _ => {}
                }
            } else {
                colour[r] = 2;
                stack.pop();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `r0 ::= r1`, `r1 ::= r2`, ... `rN ::= ""`: each rule is nullable through the next one,
    /// written in the order a sweep learns least from (one rule per sweep).
    fn reverse_chain(n: usize) -> Vec<Vec<Vec<Item>>> {
        let mut defs: Vec<Vec<Vec<Item>>> = (0..n - 1)
            .map(|r| {
                vec![
                    vec![Item::Ref(r as u32 + 1)],
                    vec![Item::Bytes(ByteSet::single(b'x'))],
                ]
            })
            .collect();
        defs.push(vec![Vec::new()]);
        defs
    }

    #[test]
    fn nullable_rules_follow_references() {
        let x = || Item::Bytes(ByteSet::single(b'x'));
        let defs = vec![
            vec![vec![Item::Ref(1), Item::Ref(2)]], // 0: nullable when 1 and 2 are
            vec![vec![x()], vec![Item::Ref(2), Item::Ref(2)]], // 1: via 2, twice
            vec![vec![x()], vec![]],                // 2: ε
            vec![vec![Item::Ref(3)], vec![Item::Ref(4)]], // 3: only through itself or 4
            vec![vec![Item::Ref(2), x()]],          // 4: a byte after the nullable 2
        ];
        assert_eq!(nullable_rules(&defs).0, [true, true, true, false, false]);
    }

    /// Sweeping all rules until nothing changed took one sweep per rule of this chain (10^8
    /// item visits here, 10^9 at the rule limit): a grammar in a request must cost time linear
    /// in its size.
    #[test]
    fn nullable_work_is_linear_in_the_grammar() {
        let n = 10_000;
        let defs = reverse_chain(n);
        let items: usize = defs.iter().flatten().map(Vec::len).sum();
        let (nullable, work) = nullable_rules(&defs);
        assert!(nullable.iter().all(|&b| b));
        assert!(work <= 3 * items, "{work} steps for {items} items");
        let text: String = (0..n - 1)
            .map(|r| format!("r{r} ::= r{} | \"x\"\n", r + 1))
            .chain([format!("r{} ::= \"\"\nroot ::= r0\n", n - 1)])
            .collect();
        assert!(Grammar::parse(&text).is_ok());
    }
}
