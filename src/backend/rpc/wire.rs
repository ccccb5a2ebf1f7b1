//! ggml's RPC wire format, protocol 7.0 (`ggml/src/ggml-rpc/ggml-rpc.cpp` of the llama.cpp this
//! engine is checked against): the command numbers, the packed `rpc_tensor` record a worker
//! rebuilds its tensors from, and the FNV-1a hash of the `SET_TENSOR_HASH` shortcut. Byte
//! layouts only; the conversation is in `conn.rs`.

/// The protocol version this client speaks; a worker must have the same major version and a
/// minor version no newer.
pub const PROTO_VERSION: (u8, u8, u8) = (7, 0, 0);

/// Bytes of the transport capabilities exchanged in HELLO (all zero: plain TCP).
pub const CONN_CAPS_SIZE: usize = 24;

/// Above this many bytes a weight is first offered by hash (`SET_TENSOR_HASH`), as ggml's
/// client does, so a worker started with `-c` can take it from its file cache.
pub const HASH_THRESHOLD: usize = 10 * 1024 * 1024;

/// ggml's `GGML_MAX_DIMS`, `GGML_MAX_SRC`, `GGML_MAX_OP_PARAMS` (bytes), `GGML_MAX_NAME`.
pub const MAX_DIMS: usize = 4;
pub const MAX_SRC: usize = 10;
pub const MAX_OP_PARAMS: usize = 64;
pub const MAX_NAME: usize = 64;

/// Bytes of one serialized `rpc_tensor`.
pub const TENSOR_BYTES: usize =
    8 + 4 + 8 + 4 * MAX_DIMS * 2 + 4 + MAX_OP_PARAMS + 4 + 8 * MAX_SRC + 8 * 3 + MAX_NAME + 4;

/// The RPC commands (`enum rpc_cmd`), the whole table (a few are not sent by this client).
#[allow(dead_code)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Cmd {
    AllocBuffer = 0,
    GetAlignment = 1,
    GetMaxSize = 2,
    BufferGetBase = 3,
    FreeBuffer = 4,
    BufferClear = 5,
    SetTensor = 6,
    SetTensorHash = 7,
    GetTensor = 8,
    CopyTensor = 9,
    GraphCompute = 10,
    GetDeviceMemory = 11,
    InitTensor = 12,
    GetAllocSize = 13,
    Hello = 14,
    DeviceCount = 15,
    GraphRecompute = 16,
    MemsetTensor = 17,
}

/// One tensor as the wire carries it: the `rpc_tensor` of ggml, with ids standing for pointers
/// (a worker maps sources and view sources by id) and `data` an address inside `buffer`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WireTensor {
    pub id: u64,
    pub ty: u32,
    pub buffer: u64,
    pub ne: [u32; MAX_DIMS],
    pub nb: [u32; MAX_DIMS],
    pub op: u32,
    pub op_params: [i32; MAX_OP_PARAMS / 4],
    pub flags: i32,
    pub src: [u64; MAX_SRC],
    pub view_src: u64,
    pub view_offs: u64,
    pub data: u64,
    pub name: String,
    pub use_count: i32,
}

impl WireTensor {
    /// Appends the packed little-endian record to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.ty.to_le_bytes());
        out.extend_from_slice(&self.buffer.to_le_bytes());
        self.ne
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        self.nb
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        out.extend_from_slice(&self.op.to_le_bytes());
        self.op_params
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        out.extend_from_slice(&self.flags.to_le_bytes());
        self.src
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        out.extend_from_slice(&self.view_src.to_le_bytes());
        out.extend_from_slice(&self.view_offs.to_le_bytes());
        out.extend_from_slice(&self.data.to_le_bytes());
        let mut name = [0u8; MAX_NAME];
        let n = self.name.len().min(MAX_NAME - 1);
        name[..n].copy_from_slice(&self.name.as_bytes()[..n]);
        out.extend_from_slice(&name);
        out.extend_from_slice(&self.use_count.to_le_bytes());
        debug_assert_eq!(out.len() - start, TENSOR_BYTES);
    }

    /// The packed record alone.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(TENSOR_BYTES);
        self.write(&mut v);
        v
    }
}

/// FNV-1a over `data`, ggml's `fnv_hash`.
pub fn fnv_hash(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tensor_record_is_ggmls_packed_size() {
        // sizeof(rpc_tensor) with ggml's limits, and a multiple of 8 as ggml asserts.
        assert_eq!(TENSOR_BYTES, 296);
        let t = WireTensor {
            id: 7,
            name: "x".repeat(100),
            ..WireTensor::default()
        };
        let b = t.to_bytes();
        assert_eq!(b.len(), 296);
        assert_eq!(&b[..8], &7u64.to_le_bytes());
        // The name is cut to 63 bytes and NUL-terminated.
        let name = &b[296 - 4 - 64..296 - 4];
        assert_eq!(name[62], b'x');
        assert_eq!(name[63], 0);
    }

    #[test]
    fn fnv_is_ggmls_fnv1a() {
        assert_eq!(fnv_hash(b""), 0xcbf2_9ce4_8422_2325);
        // FNV-1a 64 of "a", a published test vector.
        assert_eq!(fnv_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
