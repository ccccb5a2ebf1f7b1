//! The GBNF parser, following llama.cpp's `grammar-parser`: `name ::= alternatives` rules,
//! `"literals"` and `[character classes]` with llama.cpp's escapes, `.` for any character,
//! `( groups )`, and the postfix operators `* + ? {m} {m,} {m,n} {,n}`. At the top level a rule
//! ends at the end of its line; inside parentheses, newlines are spaces. `#` starts a comment.

use super::compile::{Builder, ByteSet, Grammar, Item};

/// A grammar that cannot be used, with the line and column of the problem where there is one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct GrammarError {
    pub message: String,
}

impl GrammarError {
    pub fn new(message: String) -> GrammarError {
        GrammarError { message }
    }
}

/// An error at byte offset `at` of `text`: "line L, column C: problem (near `...`)".
pub fn error_at(text: &str, at: usize, problem: String) -> GrammarError {
    let at = at.min(text.len());
    let before = &text.as_bytes()[..at];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = at
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1)
        + 1;
    let near: String = String::from_utf8_lossy(&text.as_bytes()[at..])
        .chars()
        .take(16)
        .collect();
    let near = near.split('\n').next().unwrap_or("");
    GrammarError::new(if near.is_empty() {
        format!("line {line}, column {col}: {problem}")
    } else {
        format!("line {line}, column {col}: {problem} (near '{near}')")
    })
}

/// The largest repetition count accepted in `{m,n}` (each copy is laid out explicitly).
const MAX_REPEAT: u32 = 4096;
/// The most items repetitions may lay out in all (copies of a repeated item count once per
/// copy): without it, a 4 KB literal repeated 4,096 times would take 16 million items and
/// gigabytes from a grammar that fits in one request. JSON-schema grammars stay far below.
const MAX_REPEATED_ITEMS: usize = 1 << 20;
/// The deepest nesting of parentheses accepted.
const MAX_NESTING: usize = 256;

struct Parser<'a> {
    text: &'a str,
    s: &'a [u8],
    pos: usize,
    /// Parentheses open around `pos`.
    depth: usize,
    /// Items laid out by repetitions so far (bounded by [`MAX_REPEATED_ITEMS`]).
    repeated: usize,
    b: Builder,
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

impl Grammar {
    /// Parses and compiles GBNF text.
    pub fn parse(text: &str) -> Result<Grammar, GrammarError> {
        let mut p = Parser {
            text,
            s: text.as_bytes(),
            pos: 0,
            depth: 0,
            repeated: 0,
            b: Builder::default(),
        };
        p.space(true);
        if p.pos >= p.s.len() {
            return Err(GrammarError::new("the grammar is empty".to_string()));
        }
        while p.pos < p.s.len() {
            p.rule()?;
        }
        p.b.finish(text)
    }
}

impl Parser<'_> {
    fn err(&self, problem: impl Into<String>) -> GrammarError {
        error_at(self.text, self.pos, problem.into())
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    /// Skips spaces, tabs and comments, and newlines too when `newlines`.
    fn space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' => self.pos += 1,
                b'\r' | b'\n' if newlines => self.pos += 1,
                b'#' => {
                    while self.peek().is_some_and(|c| c != b'\n') {
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Result<&str, GrammarError> {
        let start = self.pos;
        while self.peek().is_some_and(is_word) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.err("expecting a rule name"));
        }
        Ok(&self.text[start..self.pos])
    }

    fn rule(&mut self) -> Result<(), GrammarError> {
        let at = self.pos;
        let name = self.name()?.to_string();
        self.space(false);
        if !self.s[self.pos..].starts_with(b"::=") {
            return Err(self.err(format!("expecting '::=' after rule name '{name}'")));
        }
        self.pos += 3;
        self.space(true);
        let id = self.b.rule_id(&name, at);
        if self.b.defs[id as usize].is_some() {
            return Err(error_at(
                self.text,
                at,
                format!("rule '{name}' is defined twice"),
            ));
        }
        let alts = self.alternates(&name, false)?;
        self.b.defs[id as usize] = Some(alts);
        match self.peek() {
            None => {}
            Some(b'\r') | Some(b'\n') => self.pos += 1,
            Some(_) => {
                return Err(self.err(format!("expecting newline or end after rule '{name}'")))
            }
        }
        self.space(true);
        Ok(())
    }

    fn alternates(&mut self, rule: &str, nested: bool) -> Result<Vec<Vec<Item>>, GrammarError> {
        let mut alts = vec![self.sequence(rule, nested)?];
        while self.peek() == Some(b'|') {
            self.pos += 1;
            self.space(true);
            alts.push(self.sequence(rule, nested)?);
        }
        Ok(alts)
    }

    fn sequence(&mut self, rule: &str, nested: bool) -> Result<Vec<Item>, GrammarError> {
        let mut seq: Vec<Item> = Vec::new();
        // Where the last item (what a postfix operator repeats) starts in `seq`.
        let mut last_start: Option<usize> = None;
        while let Some(c) = self.peek() {
            match c {
                b'"' => {
                    let open = self.pos;
                    self.pos += 1;
                    last_start = Some(seq.len());
                    while self.peek() != Some(b'"') {
                        if self.peek().is_none() {
                            return Err(error_at(
                                self.text,
                                open,
                                format!("unterminated string in rule '{rule}'"),
                            ));
                        }
                        let ch = self.char()?;
                        let mut buf = [0u8; 4];
                        for &byte in ch.encode_utf8(&mut buf).as_bytes() {
                            seq.push(Item::Bytes(ByteSet::single(byte)));
                        }
                    }
                    self.pos += 1;
                }
                b'[' => {
                    let open = self.pos;
                    self.pos += 1;
                    let negated = self.peek() == Some(b'^');
                    if negated {
                        self.pos += 1;
                    }
                    let mut ranges = Vec::new();
                    while self.peek() != Some(b']') {
                        if self.peek().is_none() {
                            return Err(error_at(
                                self.text,
                                open,
                                format!("unterminated character class in rule '{rule}'"),
                            ));
                        }
                        let lo = self.char()? as u32;
                        let mut hi = lo;
                        if self.peek() == Some(b'-') && self.s.get(self.pos + 1) != Some(&b']') {
                            self.pos += 1;
                            if self.peek().is_none() {
                                return Err(self.err("unterminated character range"));
                            }
                            hi = self.char()? as u32;
                            if hi < lo {
                                return Err(self.err(format!(
                                    "character range is backwards in rule '{rule}'"
                                )));
                            }
                        }
                        ranges.push((lo, hi));
                    }
                    self.pos += 1;
                    let ranges = normalize(ranges, negated);
                    if ranges.is_empty() {
                        return Err(self.err(format!("empty character class in rule '{rule}'")));
                    }
                    last_start = Some(seq.len());
                    seq.push(Item::Class(ranges));
                }
                b'.' => {
                    self.pos += 1;
                    last_start = Some(seq.len());
                    seq.push(Item::Class(normalize(Vec::new(), true)));
                }
                b'(' => {
                    if self.depth >= MAX_NESTING {
                        return Err(self.err(format!(
                            "parentheses nested deeper than {MAX_NESTING} in rule '{rule}'"
                        )));
                    }
                    self.pos += 1;
                    self.space(true);
                    self.depth += 1;
                    let alts = self.alternates(rule, true);
                    self.depth -= 1;
                    let alts = alts?;
                    if self.peek() != Some(b')') {
                        return Err(self.err(format!("expecting ')' in rule '{rule}'")));
                    }
                    self.pos += 1;
                    let id = self.b.synthetic(rule, alts);
                    last_start = Some(seq.len());
                    seq.push(Item::Ref(id));
                }
                b'*' | b'+' | b'?' | b'{' => {
                    let Some(start) = last_start.take() else {
                        return Err(self.err(format!(
                            "'{}' has nothing before it to repeat in rule '{rule}'",
                            c as char
                        )));
                    };
                    self.pos += 1;
                    let (min, max) = match c {
                        b'*' => (0, None),
                        b'+' => (1, None),
                        b'?' => (0, Some(1)),
                        _ => self.braces(rule)?,
                    };
                    let item: Vec<Item> = seq.drain(start..).collect();
                    self.repeat(rule, &mut seq, item, min, max)?;
                }
                c if is_word(c) => {
                    let at = self.pos;
                    let name = self.name()?.to_string();
                    let id = self.b.rule_id(&name, at);
                    last_start = Some(seq.len());
                    seq.push(Item::Ref(id));
                }
                _ => break,
            }
            self.space(nested);
        }
        Ok(seq)
    }

    /// `{m}`, `{m,}`, `{m,n}` or `{,n}` after the `{`.
    fn braces(&mut self, rule: &str) -> Result<(u32, Option<u32>), GrammarError> {
        self.space(false);
        let min = self.int()?.unwrap_or(0);
        self.space(false);
        let max = if self.peek() == Some(b',') {
            self.pos += 1;
            self.space(false);
            self.int()?
        } else {
            Some(min)
        };
        self.space(false);
        if self.peek() != Some(b'}') {
            return Err(self.err(format!("expecting '}}' in rule '{rule}'")));
        }
        self.pos += 1;
        if max.is_some_and(|m| m < min) {
            return Err(self.err(format!(
                "repetition {{{min},..}} has max below min in rule '{rule}'"
            )));
        }
        if min.max(max.unwrap_or(0)) > MAX_REPEAT {
            return Err(self.err(format!(
                "repetition count above {MAX_REPEAT} in rule '{rule}'"
            )));
        }
        Ok((min, max))
    }

    fn int(&mut self) -> Result<Option<u32>, GrammarError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return Ok(None);
        }
        self.text[start..self.pos]
            .parse()
            .map(Some)
            .map_err(|_| self.err("repetition count is too large"))
    }

    /// Appends `item` repeated `min..=max` times (unbounded when `max` is None), as llama.cpp
    /// lowers it: `min` copies, then a right-recursive rule or nested optional rules.
    fn repeat(
        &mut self,
        rule: &str,
        seq: &mut Vec<Item>,
        item: Vec<Item>,
        min: u32,
        max: Option<u32>,
    ) -> Result<(), GrammarError> {
        let copies = max.unwrap_or(min + 1).max(min) as usize;
        self.repeated = self
            .repeated
            .saturating_add(copies.saturating_mul(item.len().max(1)));
        if self.repeated > MAX_REPEATED_ITEMS {
            return Err(self.err(format!(
                "repetitions expand to more than {MAX_REPEATED_ITEMS} items in rule '{rule}'"
            )));
        }
        for _ in 0..min {
            seq.extend(item.iter().cloned());
        }
        match max {
            None => {
                // r ::= item r | ε
                let id = self.b.synthetic(rule, Vec::new());
                let mut again = item.clone();
                again.push(Item::Ref(id));
                self.b.defs[id as usize] = Some(vec![again, Vec::new()]);
                seq.push(Item::Ref(id));
            }
            Some(max) if max > min => {
                // opt_k ::= item opt_{k-1} | ε, innermost first.
                let mut inner: Option<u32> = None;
                for _ in 0..max - min {
                    let mut alt = item.clone();
                    if let Some(i) = inner {
                        alt.push(Item::Ref(i));
                    }
                    inner = Some(self.b.synthetic(rule, vec![alt, Vec::new()]));
                }
                seq.extend(inner.map(Item::Ref));
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// One character of a literal or class, with llama.cpp's escapes.
    fn char(&mut self) -> Result<char, GrammarError> {
        let rest = &self.text[self.pos..];
        let c = rest
            .chars()
            .next()
            .ok_or_else(|| self.err("unexpected end"))?;
        if c != '\\' {
            self.pos += c.len_utf8();
            return Ok(c);
        }
        let e = rest[1..]
            .chars()
            .next()
            .ok_or_else(|| self.err("unfinished escape"))?;
        let hex = |p: &mut Self, n: usize| -> Result<char, GrammarError> {
            let digits = p.text.get(p.pos + 2..p.pos + 2 + n).unwrap_or("");
            let v = (digits.len() == n && digits.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| u32::from_str_radix(digits, 16).ok())
                .flatten()
                .and_then(char::from_u32)
                .ok_or_else(|| p.err(format!("expecting {n} hex digits after '\\{e}'")))?;
            p.pos += 2 + n;
            Ok(v)
        };
        let simple = match e {
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            '\\' | '"' | '[' | ']' | '-' | '^' | '/' => Some(e),
            _ => None,
        };
        if let Some(v) = simple {
            self.pos += 2;
            return Ok(v);
        }
        match e {
            'x' => hex(self, 2),
            'u' => hex(self, 4),
            'U' => hex(self, 8),
            _ => Err(self.err(format!("unknown escape '\\{e}'"))),
        }
    }
}

/// Sorted, merged code point ranges, complemented over the Unicode scalar values when
/// `negated`; surrogates are never included.
fn normalize(mut ranges: Vec<(u32, u32)>, negated: bool) -> Vec<(u32, u32)> {
    ranges.sort();
    let mut merged: Vec<(u32, u32)> = Vec::new();
    for (lo, hi) in ranges {
        match merged.last_mut() {
            Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
            _ => merged.push((lo, hi)),
        }
    }
    let merged = if negated {
        let mut out = Vec::new();
        let mut next = 0u32;
        for (lo, hi) in merged {
            if lo > next {
                out.push((next, lo - 1));
            }
            next = hi + 1;
        }
        if next <= 0x10FFFF {
            out.push((next, 0x10FFFF));
        }
        out
    } else {
        merged
    };
    // Drop the surrogate block.
    let mut out = Vec::new();
    for (lo, hi) in merged {
        if hi < 0xD800 || lo > 0xDFFF {
            out.push((lo, hi));
        } else {
            if lo < 0xD800 {
                out.push((lo, 0xD7FF));
            }
            if hi > 0xDFFF {
                out.push((0xE000, hi));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(g: &str) -> String {
        Grammar::parse(g).unwrap_err().to_string()
    }

    #[test]
    fn errors_name_the_rule_and_position() {
        assert_eq!(
            err("root ::= \"a\"\nitem ::= [0-9\n"),
            "line 2, column 10: unterminated character class in rule 'item' (near '[0-9')"
        );
        assert!(err("root ::= x\n").contains("line 1, column 10: undefined rule 'x'"));
        assert!(err("root ::= \"a\" ) \"b\"")
            .contains("line 1, column 14: expecting newline or end after rule 'root'"));
        assert!(
            err("root ::= * \"a\"").contains("'*' has nothing before it to repeat in rule 'root'")
        );
        assert!(err("root ::= \"\\q\"").contains("unknown escape '\\q'"));
        assert!(err("root ::= \"a\"{3,2}").contains("max below min"));
        assert!(err("root ::= \"a\"\nroot ::= \"b\"")
            .contains("line 2, column 1: rule 'root' is defined twice"));
        assert!(err("root ::= root \"a\"").contains("left-recursive"));
        assert!(err("root ::= [z-a]").contains("backwards"));
        assert!(err("# only a comment\n").contains("empty"));
        let deep = format!("root ::= {}\"a\"{}", "(".repeat(300), ")".repeat(300));
        assert!(err(&deep).contains("nested deeper than 256"));
        // 4,096 copies of a 300-byte literal: 1.2 million items from 310 bytes.
        let lit = "x".repeat(300);
        let big = format!("root ::= \"a\" \"{lit}\"{{0,4096}}");
        assert!(err(&big).contains("repetitions expand to more than 1048576 items"));
        assert!(Grammar::parse(&format!("root ::= \"{lit}\"{{3000}}")).is_ok());
    }

    #[test]
    fn llama_cpp_syntax() {
        // Comments, multi-line groups, escapes, `.`, and `|` continuing onto the next line.
        let g = Grammar::parse(
            "# comment\nroot ::= ( \"x\" |\n  [\\x41-\\u0043] ) . item? # trailing\nitem ::= \"\\n\\t\\\\\\\"\" | [^\\]]{1,2}\n",
        )
        .unwrap();
        assert!(g.rules.iter().any(|r| r.name == "item"));
    }
}
