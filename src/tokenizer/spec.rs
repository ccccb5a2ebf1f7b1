//! [`VocabSpec`]: the tokenizer's inputs as plain data, in the shape of GGUF's `tokenizer.ggml.*`
//! keys, so a tokenizer can be built from a GGUF file or by hand. Absent keys stay `None` and get
//! llama.cpp's defaults in `load`.

/// Token ids named by the GGUF metadata (`tokenizer.ggml.*_token_id`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// End of turn (`<|im_end|>`, `<end_of_turn>`, ...).
    pub eot: Option<u32>,
    /// End of message (`<|eom_id|>`).
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

/// Everything a tokenizer is built from.
#[derive(Clone, Debug, Default)]
pub struct VocabSpec {
    /// `tokenizer.ggml.model`: `"gpt2"` (byte-level BPE), `"llama"` (SentencePiece) or `"bert"`
    /// (WordPiece).
    pub model: String,
    /// `tokenizer.ggml.pre`: the BPE pre-tokenizer name (`"smollm"`, `"qwen2"`, `"llama-bpe"`, ...).
    pub pre: Option<String>,
    pub tokens: Vec<String>,
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type`: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    pub token_types: Option<Vec<i32>>,
    pub merges: Option<Vec<String>>,
    pub ids: SpecialIds,
    pub add_bos: Option<bool>,
    pub add_eos: Option<bool>,
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.ggml.add_sep_token` (WordPiece vocabularies end a text with `[SEP]`).
    pub add_sep: Option<bool>,
    /// `tokenizer.ggml.normalizer.lowercase` (WordPiece; default true).
    pub lowercase: Option<bool>,
    /// `tokenizer.ggml.normalizer.strip_accents` (WordPiece; default: as `lowercase`).
    pub strip_accents: Option<bool>,
}
