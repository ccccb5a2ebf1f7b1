//! Pre-tokenizers for byte-level BPE: split text into words before any merging, the way
//! llama.cpp's `unicode_regex_split` does for each `tokenizer.ggml.pre`.
//!
//! llama.cpp runs a list of regexes, each one re-splitting the pieces of the previous one. Some
//! have hand-written fast paths in `unicode.cpp` (GPT-2, Llama 3); the rest go through
//! `std::regex` on a "collapsed" text where every non-ASCII codepoint stands for its category.
//! Every pass here is a hand-written scanner that reproduces those results, including the
//! fast paths' quirks (`\s+(?!\S)` leaves the last space for the next word, contractions are
//! case-sensitive for GPT-2 and case-insensitive for Llama 3). Byte-level encoding of the words
//! happens in `bpe`, not here.

use super::unicode::Flags;

/// How a vocabulary splits text into words (chosen by `tokenizer.ggml.pre`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)` (gpt-2, mpt, olmo).
    Gpt2,
    /// `\p{N}` (each number character alone), then GPT-2 (smollm, starcoder, refact, ...).
    DigitsThenGpt2,
    /// The Llama 3 regex with numbers in groups of at most `max_digits`:
    /// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
    /// (3 for llama3/llama-bpe/dbrx, 1 for qwen2/stablelm2).
    Llama3 { max_digits: usize },
    /// llama.cpp's fallback: `[\p{P}\$\+<=>\^~\|]+`, then GPT-2, then `\p{N}+`, then `[0-9][0-9][0-9]`.
    Default,
}

/// What a `tokenizer.ggml.pre` name implies besides the splitter (llama-vocab.cpp's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreConfig {
    pub splitter: PreTokenizer,
    /// A word that is itself a token is emitted whole, without merging (Llama 3).
    pub ignore_merges: bool,
    /// The default for `add_bos` when the GGUF does not say.
    pub add_bos: bool,
    /// Whether detokenizing tidies spaces before punctuation (`clean_up_tokenization_spaces`).
    pub clean_spaces: bool,
}

impl PreConfig {
    /// The configuration for a pre-tokenizer name, or `None` when the name is not known here.
    pub fn for_name(name: &str) -> Option<PreConfig> {
        use PreTokenizer::*;
        let (splitter, ignore_merges, add_bos, clean_spaces) = match name {
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" => (Llama3 { max_digits: 3 }, true, true, true),
            "dbrx" | "smaug-bpe" => (Llama3 { max_digits: 3 }, false, false, true),
            "qwen2" | "deepseek-r1-qwen" | "hunyuan" => {
                (Llama3 { max_digits: 1 }, false, false, false)
            }
            "stablelm2" | "megrez" => (Llama3 { max_digits: 1 }, false, false, true),
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "mpt" | "olmo" | "jais" | "exaone4" => {
                (Gpt2, false, false, true)
            }
            "trillion" | "granite-docling" => (Gpt2, false, false, false),
            "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" => {
                (DigitsThenGpt2, false, false, true)
            }
            "smollm" | "command-r" => (DigitsThenGpt2, false, false, false),
            "default" => (Default, false, false, true),
            _ => return None,
        };
        Some(PreConfig {
            splitter,
            ignore_merges,
            add_bos,
            clean_spaces,
        })
    }

    /// llama.cpp's behaviour for a BPE vocabulary without a `tokenizer.ggml.pre`.
    pub fn fallback() -> PreConfig {
        PreConfig {
            splitter: PreTokenizer::Default,
            ignore_merges: false,
            add_bos: false,
            clean_spaces: true,
        }
    }
}

/// One regex of llama.cpp's list, as a scanner over a chunk of codepoints.
#[derive(Clone, Copy, Debug)]
enum Pass {
    /// `\p{N}`
    NumberChar,
    /// `\p{N}+`
    NumberRun,
    /// `[\p{P}\$\+<=>\^~\|]+`
    PunctuationRun,
    /// `[0-9][0-9][0-9]`
    AsciiDigitTriple,
    Gpt2,
    Llama3 {
        max_digits: usize,
    },
}

impl PreTokenizer {
    fn passes(self) -> &'static [Pass] {
        match self {
            PreTokenizer::Gpt2 => &[Pass::Gpt2],
            PreTokenizer::DigitsThenGpt2 => &[Pass::NumberChar, Pass::Gpt2],
            PreTokenizer::Llama3 { max_digits: 1 } => &[Pass::Llama3 { max_digits: 1 }],
            PreTokenizer::Llama3 { .. } => &[Pass::Llama3 { max_digits: 3 }],
            PreTokenizer::Default => &[
                Pass::PunctuationRun,
                Pass::Gpt2,
                Pass::NumberRun,
                Pass::AsciiDigitTriple,
            ],
        }
    }

    /// Splits `text` into words; concatenated they give back `text`.
    pub fn split(self, text: &str) -> Vec<&str> {
        let starts: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        let chars: Vec<char> = text.chars().collect();
        let mut lens = vec![chars.len()];
        for &pass in self.passes() {
            let mut next = Vec::with_capacity(lens.len() * 2);
            let mut start = 0;
            for len in lens {
                pass.split(&chars[start..start + len], &mut next);
                start += len;
            }
            lens = next;
        }
        let byte_at = |i: usize| starts.get(i).copied().unwrap_or(text.len());
        let mut words = Vec::with_capacity(lens.len());
        let mut start = 0;
        for len in lens {
            words.push(&text[byte_at(start)..byte_at(start + len)]);
            start += len;
        }
        words
    }
}

fn flags_at(c: &[char], i: usize) -> Flags {
    c.get(i).map_or(Flags::OUTSIDE, |&ch| Flags::of(ch))
}

impl Pass {
    /// Appends the lengths (in codepoints) of the pieces of `chunk` to `out`.
    fn split(self, chunk: &[char], out: &mut Vec<usize>) {
        match self {
            Pass::NumberChar => {
                split_matches(chunk, out, |c, i| usize::from(flags_at(c, i).is_number()))
            }
            Pass::NumberRun => {
                split_matches(chunk, out, |c, i| run_len(c, i, |f, _| f.is_number()))
            }
            Pass::PunctuationRun => split_matches(chunk, out, |c, i| {
                run_len(c, i, |f, ch| f.is_punctuation() || "$+<=>^~|".contains(ch))
            }),
            Pass::AsciiDigitTriple => split_matches(chunk, out, |c, i| {
                let triple = c
                    .get(i..i + 3)
                    .is_some_and(|t| t.iter().all(char::is_ascii_digit));
                if triple {
                    3
                } else {
                    0
                }
            }),
            Pass::Gpt2 => split_words(chunk, out, gpt2_word_end),
            Pass::Llama3 { max_digits } => {
                split_words(chunk, out, |c, pos| llama3_word_end(c, pos, max_digits))
            }
        }
    }
}

/// Length of the run of characters satisfying `pred` starting at `i`.
fn run_len(c: &[char], i: usize, pred: impl Fn(Flags, char) -> bool) -> usize {
    c[i..]
        .iter()
        .take_while(|&&ch| pred(Flags::of(ch), ch))
        .count()
}

/// `std::regex_iterator` splitting: each leftmost non-empty match is a piece, and so is each gap
/// between matches. `match_len` gives the length of the match at a position (0: none).
fn split_matches(c: &[char], out: &mut Vec<usize>, match_len: impl Fn(&[char], usize) -> usize) {
    let mut gap_start = 0;
    let mut pos = 0;
    while pos < c.len() {
        let len = match_len(c, pos);
        if len == 0 {
            pos += 1;
            continue;
        }
        if pos > gap_start {
            out.push(pos - gap_start);
        }
        out.push(len);
        pos += len;
        gap_start = pos;
    }
    if gap_start < c.len() {
        out.push(c.len() - gap_start);
    }
}

/// Splitting by a scanner that, from a word start, returns where that word ends.
fn split_words(c: &[char], out: &mut Vec<usize>, word_end: impl Fn(&[char], usize) -> usize) {
    let mut pos = 0;
    while pos < c.len() {
        let end = word_end(c, pos);
        out.push(end - pos);
        pos = end;
    }
}

/// Where the whitespace alternatives end: `\s+(?!\S)` keeps the last space of a run that is
/// followed by more text, `\s+` takes the whole run.
fn whitespace_end(c: &[char], pos: usize) -> Option<usize> {
    let n_ws = c[pos..]
        .iter()
        .take_while(|&&ch| Flags::of(ch).is_whitespace())
        .count();
    match n_ws {
        0 => None,
        n if n > 1 && pos + n < c.len() => Some(pos + n - 1),
        n => Some(pos + n),
    }
}

fn gpt2_word_end(c: &[char], pos: usize) -> usize {
    let cpt = c[pos];
    // 's|'t|'re|'ve|'m|'ll|'d
    if cpt == '\'' && pos + 1 < c.len() {
        let next = c[pos + 1];
        if matches!(next, 's' | 't' | 'm' | 'd') {
            return pos + 2;
        }
        if pos + 2 < c.len() && matches!((next, c[pos + 2]), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
            return pos + 3;
        }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
    let body = pos + usize::from(cpt == ' ');
    let first = flags_at(c, body);
    let classes: [fn(Flags) -> bool; 3] = [Flags::is_letter, Flags::is_number, Flags::is_other];
    for class in classes {
        if class(first) {
            let mut end = body;
            while class(flags_at(c, end)) {
                end += 1;
            }
            return end;
        }
    }
    whitespace_end(c, pos).unwrap_or(pos + 1)
}

fn llama3_word_end(c: &[char], pos: usize, max_digits: usize) -> usize {
    let cpt = c[pos];
    let flags = Flags::of(cpt);
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if cpt == '\'' && pos + 1 < c.len() {
        let next = c[pos + 1].to_ascii_lowercase();
        if matches!(next, 's' | 't' | 'm' | 'd') {
            return pos + 2;
        }
        if pos + 2 < c.len() {
            let after = c[pos + 2].to_ascii_lowercase();
            if matches!((next, after), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
                return pos + 3;
            }
        }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if !(cpt == '\r' || cpt == '\n' || flags.is_number())
        && (flags.is_letter() || flags_at(c, pos + 1).is_letter())
    {
        let mut end = pos + 1;
        while flags_at(c, end).is_letter() {
            end += 1;
        }
        return end;
    }
    // \p{N}{1,max_digits}
    if flags.is_number() {
        let mut end = pos;
        while end - pos < max_digits && flags_at(c, end).is_number() {
            end += 1;
        }
        return end;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`; a lone space at the end of the text also lands here
    let body = pos + usize::from(cpt == ' ');
    let first = flags_at(c, body);
    if !(first.is_whitespace() || first.is_letter() || first.is_number()) {
        let mut end = body;
        while flags_at(c, end).is_other() {
            end += 1;
        }
        while matches!(c.get(end), Some('\r' | '\n')) {
            end += 1;
        }
        return end;
    }
    // \s*[\r\n]+ : up to the last newline of the whitespace run
    let n_ws = c[pos..]
        .iter()
        .take_while(|&&ch| Flags::of(ch).is_whitespace())
        .count();
    if let Some(last_nl) = c[pos..pos + n_ws]
        .iter()
        .rposition(|&ch| ch == '\r' || ch == '\n')
    {
        return pos + last_nl + 1;
    }
    whitespace_end(c, pos).unwrap_or(pos + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(p: PreTokenizer, text: &str) -> Vec<&str> {
        let words = p.split(text);
        assert_eq!(words.concat(), text);
        words
    }

    #[test]
    fn gpt2_keeps_last_space_for_next_word() {
        let words = split(PreTokenizer::Gpt2, "Hello  world   with 12 it's\t!!");
        assert_eq!(
            words,
            ["Hello", " ", " world", "  ", " with", " 12", " it", "'s", "\t", "!!"]
        );
        assert_eq!(split(PreTokenizer::Gpt2, "a  "), ["a", "  "]);
        assert_eq!(split(PreTokenizer::Gpt2, "IT'S"), ["IT", "'", "S"]);
    }

    #[test]
    fn smollm_isolates_every_digit() {
        let words = split(PreTokenizer::DigitsThenGpt2, "pi ~ 3.14²");
        assert_eq!(words, ["pi", " ~", " ", "3", ".", "1", "4", "²"]);
    }

    #[test]
    fn llama3_groups_digits_and_newlines() {
        let p = PreTokenizer::Llama3 { max_digits: 3 };
        assert_eq!(split(p, "12345 IT'S"), ["123", "45", " IT", "'S"]);
        assert_eq!(split(p, "a \n\n b"), ["a", " \n\n", " b"]);
        assert_eq!(split(p, "x:\n\ny"), ["x", ":\n\n", "y"]);
        assert_eq!(split(p, "a "), ["a", " "]);
        let q = PreTokenizer::Llama3 { max_digits: 1 };
        assert_eq!(split(q, "(12)"), ["(", "1", "2", ")"]);
        assert_eq!(split(q, "$hello   world"), ["$hello", "  ", " world"]);
    }

    #[test]
    fn default_splits_punctuation_first() {
        let words = split(PreTokenizer::Default, "a+=b 12345!");
        assert_eq!(words, ["a", "+=", "b", " ", "123", "45", "!"]);
    }

    #[test]
    fn names_follow_llama_cpp() {
        let qwen = PreConfig::for_name("qwen2").unwrap();
        assert_eq!(qwen.splitter, PreTokenizer::Llama3 { max_digits: 1 });
        assert!(!qwen.clean_spaces);
        let llama3 = PreConfig::for_name("llama-bpe").unwrap();
        assert!(llama3.ignore_merges && llama3.add_bos);
        assert_eq!(
            PreConfig::for_name("smollm").unwrap().splitter,
            PreTokenizer::DigitsThenGpt2
        );
        assert!(PreConfig::for_name("no-such-pre").is_none());
    }
}
