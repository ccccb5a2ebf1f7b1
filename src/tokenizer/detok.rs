//! Turning tokens back into bytes: each token's piece (llama.cpp's `token_to_piece`), whole
//! sequences with llama.cpp's `detokenize` rules (leading-space removal, optional
//! `clean_up_tokenization_spaces`), and [`StreamDecoder`], which hands out only whole UTF-8
//! characters while tokens arrive one at a time.

use super::unicode::char_to_byte;
use super::vocab::{attr, Token};
use super::Tokenizer;

/// How a vocabulary spells normal tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spelling {
    /// SentencePiece: `▁` stands for a space.
    Spm,
    /// Byte-level BPE: each character stands for one byte (GPT-2's table).
    ByteLevel,
}

/// The piece of a token as llama.cpp renders it with `special = true` (control tokens show
/// their text; unused and undefined tokens render as nothing).
pub fn render_piece(token: &Token, spelling: Spelling) -> Vec<u8> {
    let text = &*token.text;
    if token.attr & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
        return text.as_bytes().to_vec();
    }
    if token.attr & attr::NORMAL != 0 {
        return match spelling {
            Spelling::Spm => text.replace('\u{2581}', " ").into_bytes(),
            Spelling::ByteLevel => decode_byte_level(text),
        };
    }
    if token.attr & attr::BYTE != 0 {
        // `<0xXX>`
        let byte = text
            .get(3..5)
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        return byte.map_or_else(Vec::new, |b| vec![b]);
    }
    Vec::new()
}

/// GPT-2 characters back to bytes; a character outside the table becomes llama.cpp's
/// `[UNK_BYTE_0x..]` marker.
fn decode_byte_level(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for ch in text.chars() {
        match char_to_byte(ch) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut utf8 = [0u8; 4];
                for b in ch.encode_utf8(&mut utf8).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

/// Options for [`Tokenizer::detokenize`], llama.cpp's `llama_detokenize` flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DetokenizeOptions {
    /// Drop a leading BOS and trailing EOS that the vocabulary would have added.
    pub remove_special: bool,
    /// Render control tokens as their text instead of nothing.
    pub render_special: bool,
}

impl Tokenizer {
    /// The bytes of a token sequence, following llama.cpp's `detokenize`.
    pub fn detokenize(&self, ids: &[u32], options: DetokenizeOptions) -> Vec<u8> {
        let mut ids = ids;
        let mut remove_space = self.add_space_prefix;
        if options.remove_special
            && self.add_bos
            && ids.first().is_some_and(|&id| Some(id) == self.ids.bos)
        {
            remove_space = false;
            ids = &ids[1..];
        }
        if options.remove_special
            && self.add_eos
            && ids.last().is_some_and(|&id| Some(id) == self.ids.eos)
        {
            ids = &ids[..ids.len() - 1];
        }
        let mut out = Vec::new();
        for &id in ids {
            let piece = self.token_to_piece(id, options.render_special);
            let piece = if remove_space {
                piece.strip_prefix(b" ").unwrap_or(piece)
            } else {
                piece
            };
            remove_space = false;
            out.extend_from_slice(piece);
        }
        if self.clean_spaces {
            clean_spaces(&out)
        } else {
            out
        }
    }

    /// The text of a token sequence (control tokens hidden; invalid UTF-8 replaced by U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> String {
        String::from_utf8_lossy(&self.detokenize(ids, DetokenizeOptions::default())).into_owned()
    }
}

/// llama.cpp's `clean_up_tokenization_spaces`: drop the space before `?!.,`, collapse
/// `" ' "` to `"'"`, and drop the space before `'s 'm 're 've`.
fn clean_spaces(text: &[u8]) -> Vec<u8> {
    // pass 1: " ?", " !", " .", " ,"
    let mut pass1: Vec<u8> = Vec::with_capacity(text.len());
    for (i, &x) in text.iter().enumerate() {
        if i > 0 && text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            pass1.pop();
        }
        pass1.push(x);
    }
    // pass 2: a single apostrophe between spaces loses both spaces
    let mut pass2 = Vec::with_capacity(pass1.len());
    let mut i = 0;
    while i < pass1.len() {
        let x = pass1[i];
        if i > 0
            && x == b'\''
            && i + 1 < pass1.len()
            && pass1[i - 1] == b' '
            && pass1[i + 1] == b' '
        {
            pass2.pop();
            pass1[i + 1] = 0; // llama.cpp marks the skipped space as NUL before moving past it
            i += 1;
        }
        pass2.push(x);
        i += 1;
    }
    // pass 3: " 's", " 'm", " 're", " 've" (but not " 't", " 'd", " 'll")
    let n = pass2.len();
    let mut pass3 = Vec::with_capacity(n);
    for i in 0..n {
        let x = pass2[i];
        if i > 0 && pass2[i - 1] == b' ' && x == b'\'' && i + 1 < n {
            let x1 = pass2[i + 1];
            let x2 = pass2.get(i + 2).copied().filter(|_| i + 2 < n);
            let drop_space = matches!(x1, b's' | b'm')
                || matches!((x1, x2), (b'r', Some(b'e')) | (b'v', Some(b'e')));
            if drop_space {
                pass3.pop();
            }
        }
        pass3.push(x);
    }
    pass3
}

/// Turns a stream of token ids into text without ever splitting a UTF-8 character: bytes of an
/// unfinished character wait for the next token; [`StreamDecoder::flush`] hands out what is left,
/// replacing bytes that never became a character with U+FFFD.
#[derive(Clone, Debug, Default)]
pub struct StreamDecoder {
    pending: Vec<u8>,
    render_special: bool,
}

impl StreamDecoder {
    /// A decoder that hides control tokens, as generated text is shown to users.
    pub fn new() -> StreamDecoder {
        StreamDecoder::default()
    }

    /// A decoder that renders control tokens (such as `<|im_end|>`) as their text.
    pub fn showing_specials() -> StreamDecoder {
        StreamDecoder {
            pending: Vec::new(),
            render_special: true,
        }
    }

    /// Adds one token and returns the complete characters now available (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        self.pending
            .extend_from_slice(tokenizer.token_to_piece(id, self.render_special));
        self.push_bytes_ready()
    }

    /// Returns whatever is still pending, lossily, and empties the decoder.
    pub fn flush(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    fn push_bytes_ready(&mut self) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, tail) = rest.split_at(e.valid_up_to());
                    // the prefix was just validated, so this cannot fail
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        // bytes that can never start or continue a character
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            rest = &tail[bad..];
                        }
                        // an unfinished character: keep it for the next token
                        None => {
                            rest = tail;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_spaces_follows_llama_cpp() {
        let cleaned = clean_spaces(b"Hello , world ! It 's I 'm we 're ' quoted ' don 't");
        assert_eq!(
            String::from_utf8(cleaned).unwrap(),
            "Hello, world! It's I'm we're'quoted'don 't"
        );
    }

    #[test]
    fn pieces_by_spelling() {
        let tok = |text: &str, attr: u16| Token {
            text: text.into(),
            score: 0.0,
            attr,
        };
        assert_eq!(
            render_piece(&tok("▁Hello", attr::NORMAL), Spelling::Spm),
            b" Hello"
        );
        assert_eq!(
            render_piece(&tok("<0x0A>", attr::BYTE), Spelling::Spm),
            b"\n"
        );
        assert_eq!(
            render_piece(&tok("ĠHello", attr::NORMAL), Spelling::ByteLevel),
            b" Hello"
        );
        assert_eq!(
            render_piece(&tok("<|im_end|>", attr::CONTROL), Spelling::ByteLevel),
            b"<|im_end|>"
        );
        assert!(render_piece(&tok("[PAD1]", attr::UNUSED), Spelling::ByteLevel).is_empty());
        // "é" spelled as its two UTF-8 bytes
        assert_eq!(
            render_piece(&tok("Ã©", attr::NORMAL), Spelling::ByteLevel),
            "é".as_bytes()
        );
    }
}
