//! [`GgufFile`]: a parsed GGUF over shared bytes (usually a memory map), with typed metadata
//! accessors and zero-copy tensor data views. Finding a GGUF inside a ZIP is `bundle`'s job;
//! this only needs the byte range.

use std::fmt;
use std::path::Path;

use super::cursor::Cursor;
use super::error::GgufError;
use super::header::Header;
use super::mapping::SharedBytes;
use super::metadata::Metadata;
use super::tensor::{TensorInfo, Tensors};
use super::value::{Array, Value};

/// Alignment of the data section and of every tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u32 = 32;
/// The metadata key that overrides [`DEFAULT_ALIGNMENT`].
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// A parsed GGUF. Metadata is decoded up front; tensor data stays in the shared bytes.
pub struct GgufFile {
    bytes: SharedBytes,
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Metadata,
    tensors: Tensors,
}

impl GgufFile {
    /// Maps and parses the GGUF file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        GgufFile::from_shared(SharedBytes::map_file(path.as_ref())?)
    }

    /// Maps the file at `path` and parses the GGUF stored at `offset..offset + len` inside it (a
    /// model stored in a ZIP, such as our own executable). Tensor alignment counts from the
    /// GGUF's start, so that start must itself be a multiple of the GGUF's alignment.
    pub fn open_range(
        path: impl AsRef<Path>,
        offset: u64,
        len: u64,
    ) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let whole = SharedBytes::map_file(path)?;
        let bytes = whole
            .slice(offset, len)
            .ok_or_else(|| GgufError::RangeOutsideFile {
                path: path.to_owned(),
                offset,
                len,
                size: whole.len() as u64,
            })?;
        GgufFile::from_shared(bytes)?.starting_at(path, offset)
    }

    /// This GGUF, found at `offset` of the file at `path`, if that start keeps its tensors
    /// aligned (alignment counts from the GGUF's start).
    fn starting_at(self, path: &Path, offset: u64) -> Result<GgufFile, GgufError> {
        if !offset.is_multiple_of(self.alignment) {
            return Err(GgufError::MisalignedStart {
                path: path.to_owned(),
                offset,
                alignment: self.alignment,
            });
        }
        Ok(self)
    }

    /// Reads the GGUF stored at `offset..offset + len` of the file at `path` into memory of its
    /// own instead of mapping the file (`--no-mmap`; see [`SharedBytes::read_file_range`]).
    pub fn read_range(
        path: impl AsRef<Path>,
        offset: u64,
        len: u64,
    ) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        GgufFile::from_shared(SharedBytes::read_file_range(path, offset, len)?)?
            .starting_at(path, offset)
    }

    /// Parses a GGUF held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        GgufFile::from_shared(SharedBytes::from_vec(bytes))
    }

    /// Parses a GGUF from shared bytes (for example a window of an existing mapping). Whether
    /// the window's start is suitably aligned in memory is the caller's concern.
    pub fn from_shared(bytes: SharedBytes) -> Result<GgufFile, GgufError> {
        let mut cur = Cursor::new(&bytes);
        let header = Header::read(&mut cur)?;
        let metadata = Metadata::read(&mut cur, header.n_kv)?;
        let tensors = Tensors::read(&mut cur, header.n_tensors)?;
        let header_end = cur.pos();
        let alignment = alignment_of(&metadata)?;
        // header_end <= len <= isize::MAX and alignment <= 2^31: no overflow.
        let data_offset = header_end.div_ceil(alignment) * alignment;
        tensors.check_layout(data_offset, alignment, bytes.len() as u64)?;
        Ok(GgufFile {
            bytes,
            version: header.version,
            alignment,
            data_offset,
            metadata,
            tensors,
        })
    }

    /// The whole GGUF.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The shared bytes of the whole GGUF; clone it to keep the mapping alive.
    pub fn shared_bytes(&self) -> &SharedBytes {
        &self.bytes
    }

    /// The GGUF format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Alignment of the data section and of every tensor's offset.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Offset of the data section from the start of the GGUF.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Metadata entries in file order.
    pub fn metadata(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.metadata.iter()
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    /// An integer value of any type that fits a `u32`.
    pub fn get_u32(&self, key: &str) -> Option<u32> {
        self.get(key)?.as_u32()
    }

    /// An integer value of any type that fits a `u64`.
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }

    /// An integer value of any type that fits an `i64`.
    pub fn get_i64(&self, key: &str) -> Option<i64> {
        self.get(key)?.as_i64()
    }

    /// An `f32` or `f64` value, as `f32`.
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        self.get(key)?.as_f32()
    }

    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    pub fn get_array(&self, key: &str) -> Option<&Array> {
        self.get(key)?.as_array()
    }

    pub fn get_str_array(&self, key: &str) -> Option<&[String]> {
        self.get_array(key)?.as_strs()
    }

    pub fn get_f32_array(&self, key: &str) -> Option<&[f32]> {
        self.get_array(key)?.as_f32s()
    }

    pub fn get_i32_array(&self, key: &str) -> Option<&[i32]> {
        self.get_array(key)?.as_i32s()
    }

    /// `general.architecture` (`llama`, `qwen2`, `gemma3`, ...).
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors.infos
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors
            .index
            .get(name)
            .map(|&i| &self.tensors.infos[i])
    }

    /// The data of `tensor`, borrowed from the mapping.
    ///
    /// # Panics
    /// If `tensor` is not one of this file's infos and its data lies outside this GGUF.
    pub fn tensor_data(&self, tensor: &TensorInfo) -> &[u8] {
        let start = (self.data_offset + tensor.offset) as usize;
        &self.bytes[start..start + tensor.n_bytes() as usize]
    }

    /// Gives back the memory of `part` (bytes of this file, such as a tensor's data copied
    /// elsewhere) where the file is mapped: see [`SharedBytes::release_pages`].
    pub fn release_pages(&self, part: &[u8]) {
        self.bytes.release_pages(part);
    }
}

/// `general.alignment`, or the default; it must be a non-zero power of two that fits a `u32`.
fn alignment_of(metadata: &Metadata) -> Result<u64, GgufError> {
    let Some(value) = metadata.get(ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT.into());
    };
    match value.as_u32() {
        Some(a) if a.is_power_of_two() => Ok(a.into()),
        _ => Err(GgufError::BadAlignment {
            found: describe(value),
        }),
    }
}

/// A short description of a value for error messages (never a whole array).
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Array(a) => format!("an array of {} {:?}", a.len(), a.elem_type()),
        Value::Str(s) => format!("the string {:?}", s.chars().take(40).collect::<String>()),
        other => format!("{other:?}"),
    }
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("architecture", &self.architecture())
            .field("n_metadata", &self.metadata.iter().len())
            .field("n_tensors", &self.tensors.infos.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .field("bytes", &self.bytes)
            .finish()
    }
}
