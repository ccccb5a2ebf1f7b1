//! GGUF files: header, metadata values, tensor infos, alignment, and zero-copy views of tensor
//! data in a shared memory map; plus a small writer for building GGUFs.
//!
//! Owns the GGUF format only: where a GGUF sits inside a ZIP is `bundle`'s concern, what the
//! metadata means is `model`'s and `tokenizer`'s, and what tensor bytes mean is `quant`'s.
//!
//! ```no_run
//! use llamafile::gguf::GgufFile;
//! let gguf = GgufFile::open("model.gguf")?;
//! let vocab = gguf.get_str_array("tokenizer.ggml.tokens").unwrap_or_default();
//! let embd = gguf.tensor("token_embd.weight").expect("has embeddings");
//! let data: &[u8] = gguf.tensor_data(embd);
//! # let _ = (vocab, data);
//! # Ok::<(), llamafile::gguf::GgufError>(())
//! ```

mod cursor;
mod error;
mod file;
mod file_type;
mod header;
mod mapping;
mod metadata;
mod tensor;
mod value;
pub mod writer;

#[cfg(test)]
mod tests;

pub use error::{GgufError, GgufWriteError};
pub use file::{GgufFile, ALIGNMENT_KEY, DEFAULT_ALIGNMENT};
pub use file_type::file_type_name;
pub use header::SUPPORTED_VERSIONS;
pub use mapping::SharedBytes;
pub use metadata::MAX_ARRAY_DEPTH;
pub use tensor::{TensorInfo, MAX_DIMS};
pub use value::{Array, Value, ValueType};
pub use writer::GgufWriter;
