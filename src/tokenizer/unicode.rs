//! Unicode facts the pre-tokenizers need, as llama.cpp's `unicode.cpp` sees them: per-codepoint
//! general-category flags (letter, number, punctuation, mark, symbol, control), the White_Space property, and GPT-2's
//! byte ↔ printable-character table used by byte-level BPE.
//!
//! Owns no splitting logic (see `pretokenize`). The category tables come from `regex-syntax`,
//! the same Unicode data llama.cpp generates its tables from (Python's `regex` `\p{..}`).

use std::sync::OnceLock;

use regex_syntax::hir::{Class, HirKind};

const NUMBER: u8 = 1 << 0;
const LETTER: u8 = 1 << 1;
const PUNCTUATION: u8 = 1 << 2;
const WHITESPACE: u8 = 1 << 3;
const MARK: u8 = 1 << 4;
const SYMBOL: u8 = 1 << 5;
const CONTROL: u8 = 1 << 6;

const N_CODEPOINTS: usize = 0x11_0000;

/// Category flags of one codepoint. Every codepoint has a category in llama.cpp's tables, so a
/// `Flags` for a real character is never "undefined"; positions past the end of a chunk are
/// represented by `Flags::OUTSIDE` instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flags {
    bits: u8,
    inside: bool,
}

impl Flags {
    /// The flags of a position outside the text being split (llama.cpp's all-zero flags).
    pub const OUTSIDE: Flags = Flags {
        bits: 0,
        inside: false,
    };

    pub fn of(c: char) -> Flags {
        Flags {
            bits: table()[c as usize],
            inside: true,
        }
    }
    pub fn is_letter(self) -> bool {
        self.bits & LETTER != 0
    }
    pub fn is_number(self) -> bool {
        self.bits & NUMBER != 0
    }
    pub fn is_punctuation(self) -> bool {
        self.bits & PUNCTUATION != 0
    }
    pub fn is_whitespace(self) -> bool {
        self.bits & WHITESPACE != 0
    }
    /// A combining mark (`\p{M}`), what BERT's accent stripping drops.
    pub fn is_accent_mark(self) -> bool {
        self.bits & MARK != 0
    }
    pub fn is_symbol(self) -> bool {
        self.bits & SYMBOL != 0
    }
    /// A control, format or private-use character (`\p{Cc}`, `\p{Cf}`, `\p{Co}`; unassigned
    /// codepoints are not, as in llama.cpp's tables).
    pub fn is_control(self) -> bool {
        self.bits & CONTROL != 0
    }
    /// `[^\s\p{L}\p{N}]`: a real character that is neither whitespace, letter nor number.
    pub fn is_other(self) -> bool {
        self.inside && self.bits & (WHITESPACE | LETTER | NUMBER) == 0
    }
}

fn table() -> &'static [u8] {
    static TABLE: OnceLock<Vec<u8>> = OnceLock::new();
    TABLE.get_or_init(build_table)
}

fn build_table() -> Vec<u8> {
    let mut table = vec![0u8; N_CODEPOINTS];
    for (class, flag) in [
        (r"\p{N}", NUMBER),
        (r"\p{L}", LETTER),
        (r"\p{P}", PUNCTUATION),
        (r"\p{M}", MARK),
        (r"\p{S}", SYMBOL),
        (r"\p{Cc}", CONTROL),
        (r"\p{Cf}", CONTROL),
        (r"\p{Co}", CONTROL),
    ] {
        for (start, end) in class_ranges(class) {
            for cp in start..=end {
                table[cp as usize] |= flag;
            }
        }
    }
    for (cp, flags) in table.iter_mut().enumerate() {
        if char::from_u32(cp as u32).is_some_and(char::is_whitespace) {
            *flags |= WHITESPACE;
        }
    }
    table
}

/// Codepoint ranges of a Unicode class such as `\p{L}`.
fn class_ranges(class: &str) -> Vec<(u32, u32)> {
    // The patterns are constants known to parse; failure would be a bug in this file.
    let hir = regex_syntax::parse(class).expect("constant Unicode class pattern");
    match hir.kind() {
        HirKind::Class(Class::Unicode(set)) => set
            .ranges()
            .iter()
            .map(|r| (r.start() as u32, r.end() as u32))
            .collect(),
        other => unreachable!("{class} parsed to {other:?}"),
    }
}

/// GPT-2's byte → character table: printable Latin-1 bytes map to themselves, the rest to
/// U+0100 onwards in byte order.
pub fn byte_to_char(b: u8) -> char {
    byte_tables().0[b as usize]
}

/// The inverse of [`byte_to_char`]; `None` for characters that encode no byte.
pub fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 0x200 {
        let b = byte_tables().1[cp as usize];
        (b >= 0).then_some(b as u8)
    } else {
        None
    }
}

type ByteTables = ([char; 256], [i16; 0x200]);

fn byte_tables() -> &'static ByteTables {
    static TABLES: OnceLock<ByteTables> = OnceLock::new();
    TABLES.get_or_init(|| {
        let printable = |b: u8| matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
        let mut to_char = ['\0'; 256];
        let mut to_byte = [-1i16; 0x200];
        let mut next = 0x100u32;
        for b in 0..=255u8 {
            let cp = if printable(b) {
                b as u32
            } else {
                next += 1;
                next - 1
            };
            to_char[b as usize] = char::from_u32(cp).unwrap_or('\u{FFFD}');
            to_byte[cp as usize] = b as i16;
        }
        (to_char, to_byte)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_match_llama_cpp_tables() {
        assert!(
            Flags::of('a').is_letter() && Flags::of('é').is_letter() && Flags::of('中').is_letter()
        );
        assert!(
            Flags::of('7').is_number() && Flags::of('²').is_number() && Flags::of('Ⅻ').is_number()
        );
        assert!(Flags::of('!').is_punctuation() && Flags::of('。').is_punctuation());
        assert!(!Flags::of('$').is_punctuation() && Flags::of('$').is_other());
        assert!(Flags::of('\u{3000}').is_whitespace() && Flags::of('\u{a0}').is_whitespace());
        assert!(Flags::of('\u{85}').is_whitespace());
        // zero-width space is a format character, not White_Space; neither are the ASCII
        // information separators that Python's `re` (but not `regex`) treats as spaces
        assert!(Flags::of('\u{200b}').is_other());
        assert!(Flags::of('\u{1c}').is_other());
        // combining marks are neither letters nor numbers
        assert!(Flags::of('\u{301}').is_other());
        assert!(!Flags::OUTSIDE.is_other());
    }

    #[test]
    fn gpt2_byte_table_round_trips() {
        assert_eq!(byte_to_char(b'A'), 'A');
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(0xAD), 'Ń');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        assert_eq!(char_to_byte('中'), None);
    }
}
