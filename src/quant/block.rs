//! Viewing raw tensor bytes as slices of block structs, and the scalar half-precision helpers
//! every block format shares. Owns the one `unsafe` cast that turns `&[u8]` into `&[Block]`;
//! block layouts themselves live in their format's file.

use super::GgmlType;

/// A `#[repr(C)]` block struct whose fields are all byte arrays (alignment 1, no padding) and for
/// which every bit pattern is a valid value, so that any byte slice of the right length can be
/// viewed as a slice of blocks.
///
/// # Safety
/// Implementors must be `#[repr(C)]`, have alignment 1, no padding, no invalid bit patterns, and
/// `size_of::<Self>() == Self::TYPE.block_bytes()`.
pub unsafe trait Block: Copy + Sized {
    /// The element type this block stores.
    const TYPE: GgmlType;
}

/// Views `bytes` as blocks. Panics if the length is not a whole number of blocks.
#[inline]
pub fn as_blocks<B: Block>(bytes: &[u8]) -> &[B] {
    const { assert!(std::mem::align_of::<B>() == 1) };
    let size = std::mem::size_of::<B>();
    assert!(
        bytes.len().is_multiple_of(size),
        "{} bytes is not a whole number of {} blocks",
        bytes.len(),
        B::TYPE
    );
    // SAFETY: `Block` guarantees alignment 1, no padding and that every bit pattern is valid;
    // the length is a whole number of blocks, so the view covers exactly `bytes`.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<B>(), bytes.len() / size) }
}

/// Views `bytes` as mutable blocks. Panics if the length is not a whole number of blocks.
#[inline]
pub fn as_blocks_mut<B: Block>(bytes: &mut [u8]) -> &mut [B] {
    const { assert!(std::mem::align_of::<B>() == 1) };
    let size = std::mem::size_of::<B>();
    assert!(
        bytes.len().is_multiple_of(size),
        "{} bytes is not a whole number of {} blocks",
        bytes.len(),
        B::TYPE
    );
    // SAFETY: as in `as_blocks`; the exclusive borrow of `bytes` is moved into the result.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast::<B>(), bytes.len() / size) }
}

/// IEEE half (little-endian bytes) to f32; exact.
#[inline]
pub fn f16_to_f32(bits: [u8; 2]) -> f32 {
    half::f16::from_le_bytes(bits).to_f32()
}

/// f32 to IEEE half (little-endian bytes), rounding to nearest even as F16C's `vcvtps2ph` with
/// rounding mode 0 does (ggml's `GGML_CPU_FP32_TO_FP16` on x86).
#[inline]
pub fn f32_to_f16(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_le_bytes()
}

/// Reads a little-endian `i16`.
#[inline]
pub fn i16_le(bits: [u8; 2]) -> i16 {
    i16::from_le_bytes(bits)
}
