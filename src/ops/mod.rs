//! The numeric building blocks of a forward pass: matrix products over quantized weights,
//! normalisation, rotary position embedding, activations, attention, soft-capping and the
//! router of a mixture of experts, and the `sinf`/`cosf`/`expf` they share (`mathf`, glibc's bits
//! on every platform). Each works on plain
//! slices; the model code decides what to call in which order.

pub mod activation;
pub mod attention;
pub mod expf;
pub mod mathf;
pub mod matmul;
pub mod mrope;
pub mod norm;
pub mod rope;
pub mod router;
pub mod softcap;

pub use matmul::{matmul, QMat};
