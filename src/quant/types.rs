//! The GGML tensor element types this engine understands: their GGUF ids, names and block geometry.
//! Only the catalogue lives here; each block format's layout and arithmetic lives in its own file.

/// A GGML element type. Quantized types store elements in fixed-size blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
}

/// Elements in one super-block of the K-quant formats.
pub const QK_K: usize = 256;

impl GgmlType {
    /// Every type, in GGUF id order.
    pub const ALL: [GgmlType; 15] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::Q8K,
        GgmlType::BF16,
    ];

    /// The type for a GGUF `ggml_type` id, or `None` for ids this engine does not support.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GgmlType::ALL.into_iter().find(|t| t.id() == id)
    }

    /// The GGUF/ggml numeric id.
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q8_1 => 9,
            GgmlType::Q2K => 10,
            GgmlType::Q3K => 11,
            GgmlType::Q4K => 12,
            GgmlType::Q5K => 13,
            GgmlType::Q6K => 14,
            GgmlType::Q8K => 15,
            GgmlType::BF16 => 30,
        }
    }

    /// ggml's name for the type (`q4_K`, `f16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "f32",
            GgmlType::F16 => "f16",
            GgmlType::BF16 => "bf16",
            GgmlType::Q4_0 => "q4_0",
            GgmlType::Q4_1 => "q4_1",
            GgmlType::Q5_0 => "q5_0",
            GgmlType::Q5_1 => "q5_1",
            GgmlType::Q8_0 => "q8_0",
            GgmlType::Q8_1 => "q8_1",
            GgmlType::Q2K => "q2_K",
            GgmlType::Q3K => "q3_K",
            GgmlType::Q4K => "q4_K",
            GgmlType::Q5K => "q5_K",
            GgmlType::Q6K => "q6_K",
            GgmlType::Q8K => "q8_K",
        }
    }

    /// Elements per block (1 for the float types).
    pub fn block_elems(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q8_1 => 32,
            GgmlType::Q2K
            | GgmlType::Q3K
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
            | GgmlType::Q8K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q8_0 => 34,
            GgmlType::Q8_1 => 36,
            GgmlType::Q2K => 84,
            GgmlType::Q3K => 110,
            GgmlType::Q4K => 144,
            GgmlType::Q5K => 176,
            GgmlType::Q6K => 210,
            GgmlType::Q8K => 292,
        }
    }

    /// Bytes taken by `n` elements, or `None` if `n` is not a whole number of blocks or overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let be = self.block_elems() as u64;
        if !n.is_multiple_of(be) {
            return None;
        }
        (n / be).checked_mul(self.block_bytes() as u64)
    }

    /// The format activations are quantized to before a dot product with weights of this type
    /// (as ggml pairs them, so that results match llama.cpp's).
    pub fn vec_dot_type(self) -> GgmlType {
        match self {
            GgmlType::F32 => GgmlType::F32,
            GgmlType::F16 => GgmlType::F16,
            GgmlType::BF16 => GgmlType::BF16,
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => GgmlType::Q8_0,
            GgmlType::Q4_1 | GgmlType::Q5_1 => GgmlType::Q8_1,
            GgmlType::Q8_1 => GgmlType::Q8_1,
            GgmlType::Q2K
            | GgmlType::Q3K
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
            | GgmlType::Q8K => GgmlType::Q8K,
        }
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
        }
        assert_eq!(GgmlType::from_id(4), None);
        assert_eq!(GgmlType::from_id(16), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(GgmlType::Q4K.bytes_for(512), Some(288));
        assert_eq!(GgmlType::Q8_0.bytes_for(33), None);
        assert_eq!(GgmlType::F32.bytes_for(3), Some(12));
    }
}
