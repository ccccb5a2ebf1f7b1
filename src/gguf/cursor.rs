//! Bounds-checked little-endian reads over the GGUF bytes. Every read names what it was reading
//! (the [`Ctx`]) and where, so a short or absurd field becomes a precise [`GgufError`].

use std::fmt;

use super::error::GgufError;

/// What the parser is reading, for error messages.
#[derive(Clone, Debug)]
pub(crate) enum Ctx {
    Header(&'static str),
    KeyName(u64),
    Value(String),
    TensorName(u64),
    Tensor(String),
}

impl fmt::Display for Ctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ctx::Header(field) => write!(f, "header field '{field}'"),
            Ctx::KeyName(i) => write!(f, "name of metadata key #{i}"),
            Ctx::Value(key) => write!(f, "value of key '{key}'"),
            Ctx::TensorName(i) => write!(f, "name of tensor #{i}"),
            Ctx::Tensor(name) => write!(f, "info of tensor '{name}'"),
        }
    }
}

/// A read position in the GGUF bytes plus what is being read there.
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    pub ctx: Ctx,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor {
            buf,
            pos: 0,
            ctx: Ctx::Header("magic"),
        }
    }

    /// Offset of the next read from the start of the GGUF.
    pub fn pos(&self) -> u64 {
        self.pos as u64
    }

    /// Bytes left after the read position.
    pub fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: u64) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: self.ctx.to_string(),
                offset: self.pos(),
                needed: n,
                size: self.buf.len() as u64,
            });
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64)?);
        Ok(out)
    }

    pub fn u32(&mut self) -> Result<u32, GgufError> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Result<u64, GgufError> {
        self.array().map(u64::from_le_bytes)
    }

    /// A GGUF string's bytes (u64 length, then the bytes) and the offset of its length field.
    pub fn string_bytes(&mut self) -> Result<(&'a [u8], u64), GgufError> {
        let at = self.pos();
        let len = self.u64()?;
        if len > self.remaining() {
            return Err(GgufError::StringTooLong {
                what: self.ctx.to_string(),
                offset: at,
                len,
                remaining: self.remaining(),
            });
        }
        Ok((self.take(len)?, at))
    }

    /// A string that must be valid UTF-8 (keys and tensor names).
    pub fn string_strict(&mut self) -> Result<String, GgufError> {
        let (bytes, at) = self.string_bytes()?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::InvalidUtf8 {
                what: self.ctx.to_string(),
                offset: at,
            }),
        }
    }

    /// A string value: invalid UTF-8 is replaced rather than failing the whole file.
    pub fn string_lossy(&mut self) -> Result<String, GgufError> {
        let (bytes, _) = self.string_bytes()?;
        Ok(match std::str::from_utf8(bytes) {
            Ok(s) => s.to_owned(),
            Err(_) => String::from_utf8_lossy(bytes).into_owned(),
        })
    }

    /// A count of things that take at least `min_bytes` each; rejects counts the remaining bytes
    /// cannot hold, so no later allocation sized by the count can be absurd.
    pub fn count(&mut self, what: &'static str, min_bytes: u64) -> Result<u64, GgufError> {
        let at = self.pos();
        let count = self.u64()?;
        if count.saturating_mul(min_bytes) > self.remaining() {
            return Err(GgufError::CountTooLarge {
                what,
                offset: at,
                count,
                remaining: self.remaining(),
            });
        }
        Ok(count)
    }
}

/// A vector capacity for `count` parsed items: `count` was already checked against the bytes
/// left, and the reservation is capped too, so a lying count cannot reserve more than a few MB.
pub(crate) fn bounded_capacity(count: u64) -> usize {
    count.min(1 << 20) as usize
}
