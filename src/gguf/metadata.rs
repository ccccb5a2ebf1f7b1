//! The metadata section: key/value entries in file order, with lookup by key. Parsing of values
//! and (nested) arrays lives here; the value types themselves live in `value.rs`.

use std::collections::HashMap;

use super::cursor::{bounded_capacity, Ctx, Cursor};
use super::error::GgufError;
use super::value::{Array, Value, ValueType};

/// Arrays nested deeper than this are rejected (bounds the parser's recursion).
pub const MAX_ARRAY_DEPTH: usize = 16;

/// Metadata entries in file order plus an index by key.
#[derive(Debug, Default)]
pub(crate) struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// Reads `n_kv` entries; `n_kv` was already checked against the bytes left.
    pub fn read(cur: &mut Cursor<'_>, n_kv: u64) -> Result<Metadata, GgufError> {
        let mut md = Metadata {
            entries: Vec::with_capacity(bounded_capacity(n_kv)),
            index: HashMap::with_capacity(bounded_capacity(n_kv)),
        };
        for i in 0..n_kv {
            cur.ctx = Ctx::KeyName(i);
            let key_at = cur.pos();
            let key = cur.string_strict()?;
            if md.index.contains_key(&key) {
                return Err(GgufError::DuplicateKey {
                    key,
                    offset: key_at,
                });
            }
            cur.ctx = Ctx::Value(key.clone());
            let ty = read_type(cur, &key)?;
            let value = read_value(cur, ty, &key)?;
            md.index.insert(key.clone(), md.entries.len());
            md.entries.push((key, value));
        }
        Ok(md)
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }
}

fn read_type(cur: &mut Cursor<'_>, key: &str) -> Result<ValueType, GgufError> {
    let at = cur.pos();
    let id = cur.u32()?;
    ValueType::from_id(id).ok_or_else(|| GgufError::UnknownValueType {
        key: key.to_owned(),
        type_id: id,
        offset: at,
    })
}

fn read_value(cur: &mut Cursor<'_>, ty: ValueType, key: &str) -> Result<Value, GgufError> {
    Ok(match ty {
        ValueType::U8 => Value::U8(u8::from_le_bytes(cur.array()?)),
        ValueType::I8 => Value::I8(i8::from_le_bytes(cur.array()?)),
        ValueType::U16 => Value::U16(u16::from_le_bytes(cur.array()?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(cur.array()?)),
        ValueType::U32 => Value::U32(u32::from_le_bytes(cur.array()?)),
        ValueType::I32 => Value::I32(i32::from_le_bytes(cur.array()?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(cur.array()?)),
        ValueType::Bool => Value::Bool(cur.array::<1>()?[0] != 0),
        ValueType::Str => Value::Str(cur.string_lossy()?),
        ValueType::Array => Value::Array(read_array(cur, key, 1)?),
        ValueType::U64 => Value::U64(u64::from_le_bytes(cur.array()?)),
        ValueType::I64 => Value::I64(i64::from_le_bytes(cur.array()?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(cur.array()?)),
    })
}

/// Decodes `bytes` as consecutive little-endian `N`-byte elements.
fn le_vec<const N: usize, T>(bytes: &[u8], decode: fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            decode(a)
        })
        .collect()
}

/// An array body: element type, count, elements. `depth` is 1 for a top-level array.
fn read_array(cur: &mut Cursor<'_>, key: &str, depth: usize) -> Result<Array, GgufError> {
    let at = cur.pos();
    if depth > MAX_ARRAY_DEPTH {
        return Err(GgufError::ArrayTooDeep {
            what: cur.ctx.to_string(),
            offset: at,
            max: MAX_ARRAY_DEPTH,
        });
    }
    let elem = read_type(cur, key)?;
    let count_at = cur.pos();
    let count = cur.u64()?;
    let min = elem.min_bytes();
    if count.saturating_mul(min) > cur.remaining() {
        return Err(GgufError::ArrayTooLong {
            what: cur.ctx.to_string(),
            offset: count_at,
            count,
            min_elem_bytes: min,
            remaining: cur.remaining(),
        });
    }
    // `count * min` fits in the bytes left, so neither the take nor a reservation can be absurd.
    let fixed = match elem {
        ValueType::Str | ValueType::Array => &[][..],
        _ => cur.take(count * min)?,
    };
    Ok(match elem {
        ValueType::U8 => Array::U8(fixed.to_vec()),
        ValueType::I8 => Array::I8(le_vec(fixed, i8::from_le_bytes)),
        ValueType::U16 => Array::U16(le_vec(fixed, u16::from_le_bytes)),
        ValueType::I16 => Array::I16(le_vec(fixed, i16::from_le_bytes)),
        ValueType::U32 => Array::U32(le_vec(fixed, u32::from_le_bytes)),
        ValueType::I32 => Array::I32(le_vec(fixed, i32::from_le_bytes)),
        ValueType::F32 => Array::F32(le_vec(fixed, f32::from_le_bytes)),
        ValueType::Bool => Array::Bool(fixed.iter().map(|&b| b != 0).collect()),
        ValueType::U64 => Array::U64(le_vec(fixed, u64::from_le_bytes)),
        ValueType::I64 => Array::I64(le_vec(fixed, i64::from_le_bytes)),
        ValueType::F64 => Array::F64(le_vec(fixed, f64::from_le_bytes)),
        ValueType::Str => {
            let mut v = Vec::with_capacity(bounded_capacity(count));
            for _ in 0..count {
                v.push(cur.string_lossy()?);
            }
            Array::Str(v)
        }
        ValueType::Array => {
            let mut v = Vec::with_capacity(bounded_capacity(count));
            for _ in 0..count {
                v.push(read_array(cur, key, depth + 1)?);
            }
            Array::Array(v)
        }
    })
}
