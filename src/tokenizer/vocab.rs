//! The token table: each token's text, score and attributes, and the text → id map.
//!
//! Attributes follow llama.cpp's `llama_token_attr` bits; they decide which tokens are matched
//! as specials before tokenizing and how each one renders back to text. Building the table and
//! applying llama.cpp's rules to it lives in `load`; this file only stores and looks up.

use std::collections::HashMap;

/// llama.cpp's `llama_token_attr` bits.
pub mod attr {
    pub const UNDEFINED: u16 = 0;
    pub const UNKNOWN: u16 = 1 << 0;
    pub const UNUSED: u16 = 1 << 1;
    pub const NORMAL: u16 = 1 << 2;
    pub const CONTROL: u16 = 1 << 3;
    pub const USER_DEFINED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
    pub const LSTRIP: u16 = 1 << 7;
    pub const RSTRIP: u16 = 1 << 8;

    /// The attribute of a GGUF `tokenizer.ggml.token_type` value.
    pub fn from_token_type(t: i32) -> u16 {
        match t {
            1 => NORMAL,
            2 => UNKNOWN,
            3 => CONTROL,
            4 => USER_DEFINED,
            5 => UNUSED,
            6 => BYTE,
            _ => UNDEFINED,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Token {
    pub text: Box<str>,
    pub score: f32,
    pub attr: u16,
}

#[derive(Clone, Debug)]
pub struct Vocab {
    tokens: Vec<Token>,
    ids: HashMap<Box<str>, u32>,
}

impl Vocab {
    /// `tokens` must have unique texts (checked by the caller, which reports the duplicate).
    pub fn new(tokens: Vec<Token>, ids: HashMap<Box<str>, u32>) -> Vocab {
        Vocab { tokens, ids }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    pub fn token(&self, id: u32) -> Option<&Token> {
        self.tokens.get(id as usize)
    }

    pub fn attr(&self, id: u32) -> u16 {
        self.token(id).map_or(attr::UNDEFINED, |t| t.attr)
    }

    pub fn has_attr(&self, id: u32, mask: u16) -> bool {
        self.attr(id) & mask != 0
    }

    pub fn tokens(&self) -> &[Token] {
        &self.tokens
    }

    pub fn set_attr(&mut self, id: u32, value: u16) {
        if let Some(t) = self.tokens.get_mut(id as usize) {
            t.attr = value;
        }
    }
}
