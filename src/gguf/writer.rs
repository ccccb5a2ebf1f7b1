//! [`GgufWriter`]: builds a GGUF (version 3) from metadata and tensors. Used by tests, by the
//! quantize tool and by integration tests that need small synthetic models.
//!
//! The layout follows `general.alignment` (default 32): the data section starts at the header
//! end rounded up, and every tensor's data starts at an aligned offset within it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::error::GgufWriteError;
use super::file::{describe, ALIGNMENT_KEY, DEFAULT_ALIGNMENT};
use super::header::MAGIC;
use super::tensor::MAX_DIMS;
use super::value::{Array, Value};
use crate::quant::GgmlType;

/// The GGUF version the writer emits.
pub const WRITE_VERSION: u32 = 3;

struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

/// Collects metadata and tensors, then writes them as one GGUF.
#[derive(Default)]
pub struct GgufWriter {
    kvs: Vec<(String, Value)>,
    tensors: Vec<PendingTensor>,
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter::default()
    }

    /// A writer whose layout uses `alignment` (recorded as `general.alignment`).
    pub fn with_alignment(alignment: u32) -> Result<GgufWriter, GgufWriteError> {
        if !alignment.is_power_of_two() {
            return Err(GgufWriteError::BadAlignment {
                found: alignment.to_string(),
            });
        }
        let mut w = GgufWriter::new();
        w.add_kv(ALIGNMENT_KEY, Value::U32(alignment));
        Ok(w)
    }

    /// Sets `key` to `value`; a key set twice keeps its first position and its last value.
    pub fn add_kv(&mut self, key: impl Into<String>, value: impl Into<Value>) -> &mut GgufWriter {
        let key = key.into();
        let value = value.into();
        match self.kvs.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.kvs.push((key, value)),
        }
        self
    }

    /// Adds a tensor; `data` must be exactly the bytes `dims` elements of `ty` take.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: &[u64],
        ty: GgmlType,
        data: impl Into<Vec<u8>>,
    ) -> Result<&mut GgufWriter, GgufWriteError> {
        let name = name.into();
        let data = data.into();
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufWriteError::DuplicateTensor(name));
        }
        if dims.len() > MAX_DIMS {
            return Err(GgufWriteError::TooManyDims {
                tensor: name,
                n_dims: dims.len(),
                max: MAX_DIMS,
            });
        }
        let expected = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .and_then(|n| ty.bytes_for(n));
        if expected != Some(data.len() as u64) {
            return Err(GgufWriteError::SizeMismatch {
                tensor: name,
                ty: ty.name(),
                dims: dims.to_vec(),
                expected,
                got: data.len(),
            });
        }
        self.tensors.push(PendingTensor {
            name,
            dims: dims.to_vec(),
            ty,
            data,
        });
        Ok(self)
    }

    /// The whole GGUF in memory.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufWriteError> {
        let mut out = Vec::new();
        self.write_to(&mut out)?;
        Ok(out)
    }

    /// Writes the GGUF to a new file at `path`.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<(), GgufWriteError> {
        let path = path.as_ref();
        let io_err = |source| GgufWriteError::Io {
            path: path.to_owned(),
            source,
        };
        let mut out = BufWriter::new(File::create(path).map_err(io_err)?);
        match self.write_to(&mut out) {
            Err(GgufWriteError::Stream(source)) => return Err(io_err(source)),
            other => other?,
        }
        out.flush().map_err(io_err)
    }

    /// Streams the GGUF to `out`; tensor data is written straight from the buffers given.
    pub fn write_to(&self, out: &mut impl Write) -> Result<(), GgufWriteError> {
        let alignment = self.alignment()?;
        let mut header = Vec::new();
        header.extend_from_slice(&MAGIC);
        put_u32(&mut header, WRITE_VERSION);
        put_u64(&mut header, self.tensors.len() as u64);
        put_u64(&mut header, self.kvs.len() as u64);
        for (key, value) in &self.kvs {
            put_str(&mut header, key);
            put_u32(&mut header, value.value_type().id());
            put_value(&mut header, value);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_str(&mut header, &t.name);
            put_u32(&mut header, t.dims.len() as u32);
            for &d in &t.dims {
                put_u64(&mut header, d);
            }
            put_u32(&mut header, t.ty.id());
            put_u64(&mut header, offset);
            offset = align_up(offset + t.data.len() as u64, alignment);
        }
        let header_len = header.len() as u64;
        header.resize(align_up(header_len, alignment) as usize, 0);
        out.write_all(&header).map_err(GgufWriteError::Stream)?;
        let zeros = vec![0u8; alignment as usize];
        for t in &self.tensors {
            out.write_all(&t.data).map_err(GgufWriteError::Stream)?;
            let pad = align_up(t.data.len() as u64, alignment) - t.data.len() as u64;
            out.write_all(&zeros[..pad as usize])
                .map_err(GgufWriteError::Stream)?;
        }
        Ok(())
    }

    /// The alignment the layout uses: `general.alignment` if set, else the default.
    fn alignment(&self) -> Result<u64, GgufWriteError> {
        let Some((_, value)) = self.kvs.iter().find(|(k, _)| k == ALIGNMENT_KEY) else {
            return Ok(DEFAULT_ALIGNMENT.into());
        };
        match value.as_u32() {
            Some(a) if a.is_power_of_two() => Ok(a.into()),
            _ => Err(GgufWriteError::BadAlignment {
                found: describe(value),
            }),
        }
    }
}

fn align_up(n: u64, alignment: u64) -> u64 {
    n.div_ceil(alignment) * alignment
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::Str(s) => put_str(out, s),
        Value::Array(a) => put_array(out, a),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
    }
}

/// Element type, count, then the elements.
fn put_array(out: &mut Vec<u8>, array: &Array) {
    put_u32(out, array.elem_type().id());
    put_u64(out, array.len() as u64);
    macro_rules! le {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match array {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => le!(v),
        Array::U16(v) => le!(v),
        Array::I16(v) => le!(v),
        Array::U32(v) => le!(v),
        Array::I32(v) => le!(v),
        Array::F32(v) => le!(v),
        Array::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        Array::Str(v) => v.iter().for_each(|s| put_str(out, s)),
        Array::Array(v) => v.iter().for_each(|a| put_array(out, a)),
        Array::U64(v) => le!(v),
        Array::I64(v) => le!(v),
        Array::F64(v) => le!(v),
    }
}
