//! Errors from building a tokenizer out of GGUF vocabulary metadata.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum TokenizerError {
    #[error("unknown tokenizer model '{0}' (supported: \"gpt2\" byte-level BPE, \"llama\" SentencePiece)")]
    UnknownModel(String),
    #[error("GGUF has no tokenizer.ggml.model key")]
    MissingModel,
    #[error("the vocabulary is empty (tokenizer.ggml.tokens missing or has no entries)")]
    NoTokens,
    #[error("BPE vocabulary without tokenizer.ggml.merges")]
    MissingMerges,
    #[error("{key} has {got} entries but the vocabulary has {want} tokens")]
    LengthMismatch {
        key: &'static str,
        got: usize,
        want: usize,
    },
    #[error("duplicate token in vocabulary: '{text}' has ids {first} and {second}")]
    DuplicateToken {
        text: String,
        first: u32,
        second: u32,
    },
    #[error("{flag} is true, but {id_key} is not set")]
    MissingSpecialToken {
        flag: &'static str,
        id_key: &'static str,
    },
    #[error("GGUF key {key} has the wrong type (expected {expected})")]
    WrongType {
        key: &'static str,
        expected: &'static str,
    },
}
