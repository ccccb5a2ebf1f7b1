//! Tokenizers built from GGUF vocabulary metadata that reproduce llama.cpp's tokenization token
//! for token: byte-level BPE (`gpt2`, with the pre-tokenizer named by `tokenizer.ggml.pre`) and
//! SentencePiece-style merging by score (`llama`), WordPiece (`bert`), special-token parsing, detokenization and a
//! UTF-8-safe streaming decoder.
//!
//! Owns the vocabulary and text ↔ token conversion only; chat templates live in `chat`, and
//! reading the GGUF file in `gguf`.
//!
//! ```no_run
//! use llamafile::gguf::GgufFile;
//! use llamafile::tokenizer::{StreamDecoder, Tokenizer};
//! let gguf = GgufFile::open("model.gguf")?;
//! let tok = Tokenizer::from_gguf(&gguf)?;
//! let ids = tok.encode("<|im_start|>user\nHi<|im_end|>", true, true);
//! let mut stream = StreamDecoder::new();
//! let text: String = ids.iter().map(|&id| stream.push(&tok, id)).collect();
//! # let _ = text;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod bpe;
mod detok;
mod error;
mod from_gguf;
mod load;
mod pretokenize;
mod spec;
mod special;
mod spm;
mod unicode;
mod vocab;
mod wpm;

#[cfg(test)]
mod reference_tests;
#[cfg(test)]
mod tests;

pub use detok::{DetokenizeOptions, StreamDecoder};
pub use error::TokenizerError;
pub use pretokenize::PreTokenizer;
pub use spec::{SpecialIds, VocabSpec};

use bpe::Bpe;
use special::{Fragment, Specials};
use vocab::{attr, Vocab};
use wpm::Normalizer;

use crate::gguf::GgufFile;

#[derive(Clone, Debug)]
enum Model {
    Bpe(Bpe),
    /// `byte_tokens[b]`: the byte-fallback token of byte `b`.
    Spm {
        byte_tokens: Box<[Option<u32>; 256]>,
    },
    /// WordPiece (BERT); `max_len`: the longest token in bytes.
    Wpm {
        norm: Normalizer,
        max_len: usize,
    },
}

/// A vocabulary and the rules to turn text into its tokens and back, as llama.cpp does.
/// Cloning is cheap: the large tables are shared.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    vocab: std::sync::Arc<Vocab>,
    model: std::sync::Arc<Model>,
    ids: SpecialIds,
    add_bos: bool,
    add_eos: bool,
    /// `tokenizer.ggml.add_sep_token` (default: true for WordPiece, else false): whether a
    /// rerank prompt puts `[SEP]` between query and document.
    add_sep: bool,
    add_space_prefix: bool,
    clean_spaces: bool,
    /// End-of-generation ids, sorted.
    eog: Vec<u32>,
    /// Control, user-defined and unknown tokens, longest text first.
    specials: std::sync::Arc<Specials>,
    /// Each token's piece as rendered with specials shown.
    pieces: std::sync::Arc<[Box<[u8]>]>,
}

impl Tokenizer {
    pub fn new(spec: VocabSpec) -> Result<Tokenizer, TokenizerError> {
        load::build(spec)
    }

    pub fn from_gguf(gguf: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::new(VocabSpec::from_gguf(gguf)?)
    }

    /// Tokenizes `text`. `add_special` adds BOS/EOS where the vocabulary asks for them;
    /// `parse_special` recognises control tokens such as `<|im_start|>` written in the text
    /// (user-defined tokens are always recognised, as in llama.cpp).
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let fragments = special::partition(&self.vocab, &self.specials, text, parse_special);
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.ids.bos);
        }
        match &*self.model {
            Model::Bpe(bpe) => {
                for fragment in fragments {
                    match fragment {
                        Fragment::Text(range) => bpe.tokenize(&self.vocab, &text[range], &mut out),
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
            Model::Spm { byte_tokens } => {
                let mut prev_special = true;
                let mut buf = String::new();
                for fragment in fragments {
                    match fragment {
                        Fragment::Text(range) => {
                            buf.clear();
                            if self.add_space_prefix && prev_special {
                                buf.push(' ');
                            }
                            buf.push_str(&text[range]);
                            let escaped = buf.replace(' ', "\u{2581}");
                            spm::tokenize(&self.vocab, byte_tokens, &escaped, &mut out);
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                    }
                }
            }
            Model::Wpm { norm, max_len } => {
                for fragment in fragments {
                    match fragment {
                        Fragment::Text(range) => wpm::tokenize(
                            &self.vocab,
                            *norm,
                            self.ids.unk,
                            *max_len,
                            &text[range],
                            &mut out,
                        ),
                        Fragment::Token(id) => out.push(id),
                    }
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.ids.eos);
        }
        // llama.cpp ends a WordPiece text with [SEP] whatever `add_sep_token` says.
        if add_special && matches!(*self.model, Model::Wpm { .. }) {
            out.extend(self.ids.sep);
        }
        out
    }

    /// The bytes of one token. With `special`, control tokens render as their text (for traces);
    /// without, they render as nothing, like llama.cpp's `token_to_piece(.., special=false)`.
    pub fn token_to_piece(&self, id: u32, special: bool) -> &[u8] {
        if !special && self.vocab.has_attr(id, attr::CONTROL | attr::UNKNOWN) {
            return &[];
        }
        self.pieces.get(id as usize).map_or(&[], |p| p)
    }

    /// The token's text as stored in the vocabulary (`ĠHello`, `▁world`, `<0x0A>`).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.token(id).map(|t| &*t.text)
    }

    /// The id of a token with exactly this vocabulary text.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }

    /// Whether generation should stop at this token (EOS, EOT, EOM, `<|im_end|>`, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.binary_search(&id).is_ok()
    }

    /// Every end-of-generation id, sorted.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Whether the token is a control token (rendered only when specials are shown).
    pub fn is_control(&self, id: u32) -> bool {
        self.vocab.has_attr(id, attr::CONTROL)
    }

    pub fn n_vocab(&self) -> usize {
        self.vocab.len()
    }

    pub fn bos(&self) -> Option<u32> {
        self.ids.bos
    }

    pub fn eos(&self) -> Option<u32> {
        self.ids.eos
    }

    pub fn eot(&self) -> Option<u32> {
        self.ids.eot
    }

    /// All special ids after llama.cpp's defaults and text-based detection.
    pub fn special_ids(&self) -> &SpecialIds {
        &self.ids
    }

    /// Whether `encode(.., add_special = true, ..)` starts with BOS.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `encode(.., add_special = true, ..)` ends with EOS.
    pub fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// `tokenizer.ggml.add_sep_token`, true by default for WordPiece vocabularies (whose
    /// `encode(.., add_special = true, ..)` ends with `[SEP]` in any case).
    pub fn add_sep(&self) -> bool {
        self.add_sep
    }

    /// The BPE pre-tokenizer in use (`None` for SentencePiece and WordPiece vocabularies).
    pub fn pre_tokenizer(&self) -> Option<PreTokenizer> {
        match &*self.model {
            Model::Bpe(bpe) => Some(bpe.pre().splitter),
            Model::Spm { .. } | Model::Wpm { .. } => None,
        }
    }
}
