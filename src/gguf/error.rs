//! Every way reading or writing a GGUF can fail. Each message is one line that names what is
//! wrong and where: a byte offset counted from the start of the GGUF, a key or a tensor name.

use std::path::PathBuf;

/// A GGUF could not be opened or parsed.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is {size} bytes; cannot take the GGUF at offset {offset} of length {len}", path.display())]
    RangeOutsideFile {
        path: PathBuf,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error(
        "not a GGUF: the magic at offset 0 is {found:02x?} ({:?}), expected \"GGUF\"",
        String::from_utf8_lossy(found)
    )]
    BadMagic { found: [u8; 4] },
    #[error("unsupported GGUF version {version} at offset 4 (supported: 2 and 3)")]
    UnsupportedVersion { version: u32 },
    #[error(
        "truncated {what}: {needed} bytes needed at offset {offset}, but the GGUF ends at {size}"
    )]
    Truncated {
        what: String,
        offset: u64,
        needed: u64,
        size: u64,
    },
    #[error("truncated or absurd string in {what}: length {len} at offset {offset}, but only {remaining} bytes remain")]
    StringTooLong {
        what: String,
        offset: u64,
        len: u64,
        remaining: u64,
    },
    #[error("truncated or absurd array in {what}: {count} elements of at least {min_elem_bytes} bytes at offset {offset}, but only {remaining} bytes remain")]
    ArrayTooLong {
        what: String,
        offset: u64,
        count: u64,
        min_elem_bytes: u64,
        remaining: u64,
    },
    #[error("truncated or absurd {what} count {count} at offset {offset}: only {remaining} bytes remain")]
    CountTooLarge {
        what: &'static str,
        offset: u64,
        count: u64,
        remaining: u64,
    },
    #[error("arrays nested deeper than {max} in {what} at offset {offset}")]
    ArrayTooDeep {
        what: String,
        offset: u64,
        max: usize,
    },
    #[error("unknown metadata value type {type_id} for key '{key}' at offset {offset}")]
    UnknownValueType {
        key: String,
        type_id: u32,
        offset: u64,
    },
    #[error("invalid UTF-8 in {what} at offset {offset}")]
    InvalidUtf8 { what: String, offset: u64 },
    #[error("duplicate metadata key '{key}' at offset {offset}")]
    DuplicateKey { key: String, offset: u64 },
    #[error("duplicate tensor name '{tensor}' at offset {offset}")]
    DuplicateTensor { tensor: String, offset: u64 },
    #[error("general.alignment is {found}; it must be a non-zero power of two (u32)")]
    BadAlignment { found: String },
    #[error("tensor '{tensor}' has {n_dims} dimensions (at most {max}) at offset {offset}")]
    TooManyDims {
        tensor: String,
        n_dims: u32,
        max: usize,
        offset: u64,
    },
    #[error(
        "tensor '{tensor}' has unknown or unsupported ggml type id {type_id} at offset {offset}"
    )]
    UnknownTensorType {
        tensor: String,
        type_id: u32,
        offset: u64,
    },
    #[error("tensor '{tensor}' dimensions {dims:?} have an element count that overflows u64")]
    ShapeOverflow { tensor: String, dims: Vec<u64> },
    #[error("tensor '{tensor}' has {n_elements} elements, not a whole number of {ty} blocks of {block_elems}")]
    NotWholeBlocks {
        tensor: String,
        n_elements: u64,
        ty: &'static str,
        block_elems: usize,
    },
    #[error(
        "tensor '{tensor}' data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },
    #[error(
        "tensor '{tensor}' data ends at offset {end}, past the end of the GGUF ({size} bytes)"
    )]
    TensorPastEnd {
        tensor: String,
        end: u128,
        size: u64,
    },
    #[error("the GGUF starts at offset {offset} of {}, which is not a multiple of its alignment {alignment}", path.display())]
    MisalignedStart {
        path: PathBuf,
        offset: u64,
        alignment: u64,
    },
}

/// A GGUF could not be built or written by [`super::writer::GgufWriter`].
#[derive(Debug, thiserror::Error)]
pub enum GgufWriteError {
    #[error("cannot write {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write the GGUF: {0}")]
    Stream(std::io::Error),
    #[error("duplicate tensor name '{0}'")]
    DuplicateTensor(String),
    #[error("tensor '{tensor}' has {n_dims} dimensions (at most {max})")]
    TooManyDims {
        tensor: String,
        n_dims: usize,
        max: usize,
    },
    #[error("tensor '{tensor}' of type {ty} with dimensions {dims:?} needs {expected:?} bytes, got {got}")]
    SizeMismatch {
        tensor: String,
        ty: &'static str,
        dims: Vec<u64>,
        expected: Option<u64>,
        got: usize,
    },
    #[error("general.alignment is {found}; it must be a non-zero power of two (u32)")]
    BadAlignment { found: String },
}
