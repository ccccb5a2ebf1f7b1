//! Tensor element formats: one file per block format (layout, dequantization, quantization of
//! activations, dot products), and the runtime choice of SIMD variants.

mod types;

pub use types::{GgmlType, QK_K};
