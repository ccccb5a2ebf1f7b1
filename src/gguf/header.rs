//! The fixed GGUF header: magic, version, tensor count and metadata count.

use super::cursor::{Ctx, Cursor};
use super::error::GgufError;

pub const MAGIC: [u8; 4] = *b"GGUF";

/// Versions this reader understands (v1 used 32-bit counts and is long obsolete).
pub const SUPPORTED_VERSIONS: [u32; 2] = [2, 3];

/// The least bytes one metadata entry takes: key length, type id, a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// The least bytes one tensor info takes: name length, n_dims, type id, offset.
pub const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// The header fields that precede the metadata.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Header {
    pub version: u32,
    pub n_tensors: u64,
    pub n_kv: u64,
}

impl Header {
    pub fn read(cur: &mut Cursor<'_>) -> Result<Header, GgufError> {
        cur.ctx = Ctx::Header("magic");
        let magic = cur.array::<4>()?;
        if magic != MAGIC {
            return Err(GgufError::BadMagic { found: magic });
        }
        cur.ctx = Ctx::Header("version");
        let version = cur.u32()?;
        if !SUPPORTED_VERSIONS.contains(&version) {
            return Err(GgufError::UnsupportedVersion { version });
        }
        cur.ctx = Ctx::Header("tensor count");
        let n_tensors = cur.count("tensor", MIN_TENSOR_INFO_BYTES)?;
        cur.ctx = Ctx::Header("metadata count");
        let n_kv = cur.count("metadata key", MIN_KV_BYTES)?;
        Ok(Header {
            version,
            n_tensors,
            n_kv,
        })
    }
}
