//! Choosing kernel variants once per process: a table of function pointers per element type,
//! filled with the scalar reference and then overridden by SIMD kernels. Which variant runs is
//! [`crate::cpu::isa`]'s choice (`LLAMAFILE_CPU` forces one).

use std::sync::OnceLock;

use super::block::{as_blocks, as_blocks_mut, Block};
use super::GgmlType;
use super::{bf16, f16, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0, q8_1, q8_k};

/// Dot product of a weight row with an activation row (lengths already checked).
pub(crate) type VecDotFn = fn(w: &[u8], a: &[u8]) -> f32;
/// Dot products of a weight row with `out.len()` activation rows of `row_bytes` bytes each,
/// `stride` bytes apart (lengths already checked); must give [`VecDotFn`]'s bits per row.
pub(crate) type VecDotRowsFn =
    fn(w: &[u8], acts: &[u8], stride: usize, row_bytes: usize, out: &mut [f32]);
/// Tile product of weight rows with packed activations (see `quant::gemm::gemm`; lengths
/// already checked).
pub(crate) type GemmFn = fn(
    w: &[u8],
    rows: usize,
    acts: &super::gemm::PackedActs,
    pairs: std::ops::Range<usize>,
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
);
/// Matrix-vector product of weight rows with one packed token (see `quant::gemm::matvec`;
/// lengths already checked).
pub(crate) type MatvecFn = fn(w: &[u8], acts: &super::gemm::PackedActs, out: &mut [f32]);
/// Product of regrouped K-quant rows (`quant::x8`) with Q8_K token rows (lengths already
/// checked): `out[t · t_stride + r · r_stride]`.
pub(crate) type X8GemmFn = fn(
    w: &[u8],
    rows: usize,
    ys: &[&[super::q8_k::BlockQ8K]],
    out: &mut [f32],
    t_stride: usize,
    r_stride: usize,
);
/// Quantization of an f32 row (lengths already checked).
pub(crate) type QuantizeFn = fn(src: &[f32], dst: &mut [u8]);
/// Dequantization of a row (lengths already checked).
pub(crate) type DequantizeFn = fn(src: &[u8], dst: &mut [f32]);

const N_TYPES: usize = GgmlType::ALL.len();

/// One complete set of kernels.
#[derive(Clone)]
pub(crate) struct Kernels {
    /// `scalar`, `avx2`, `avx512`, `neon` or `dotprod`.
    pub name: &'static str,
    /// Indexed by [`slot`] of the weight type; `None` where the type has no dot product.
    pub vec_dot: [Option<VecDotFn>; N_TYPES],
    /// Multi-row variants, where a kernel reuses each decoded weight block; `None` means loop
    /// over `vec_dot`.
    pub vec_dot_rows: [Option<VecDotRowsFn>; N_TYPES],
    /// Tile kernels over packed activations (`quant::gemm`); `None` where the variant has none.
    pub gemm: [Option<GemmFn>; N_TYPES],
    /// Matrix-vector kernels over a packed token; `None` where the variant has none.
    pub matvec: [Option<MatvecFn>; N_TYPES],
    /// Kernels over weights regrouped by eight rows (`quant::x8`), by [`slot`] of the weight
    /// type; `None` where the variant has none (then weights of that type are not regrouped).
    pub x8_matvec: [Option<MatvecFn>; N_TYPES],
    pub x8_gemm: [Option<X8GemmFn>; N_TYPES],
    /// Indexed by [`slot`] of the target type; `None` where no quantizer exists.
    pub quantize: [Option<QuantizeFn>; N_TYPES],
}

/// The table index of a type.
#[inline]
pub(crate) fn slot(ty: GgmlType) -> usize {
    ty as usize
}

/// The variant in use (`scalar`, `avx2` or `avx512` on x86-64; `scalar`, `neon` or `dotprod` on
/// aarch64).
pub fn kernel_variant() -> &'static str {
    kernels().name
}

/// The kernel table in use: the one of [`crate::cpu::isa`], built on first call.
#[inline]
pub(crate) fn kernels() -> &'static Kernels {
    static KERNELS: OnceLock<Kernels> = OnceLock::new();
    KERNELS.get_or_init(|| table(crate::cpu::isa()))
}

/// The kernel table of `isa` (which this CPU must support).
pub(crate) fn table(isa: crate::cpu::Isa) -> Kernels {
    available()
        .into_iter()
        .find(|k| k.name == isa.name())
        .unwrap_or_else(|| panic!("no kernel table for {}", isa.name()))
}

/// Every variant this CPU can run, worst first (the scalar reference is always first).
pub(crate) fn available() -> Vec<Kernels> {
    #[allow(unused_mut)]
    let mut out = vec![scalar()];
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(k) = super::x86::avx2(scalar()) {
            out.push(k.clone());
            if let Some(k) = super::x86::avx512(k) {
                out.push(k);
            }
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if let Some(k) = super::aarch64::neon(scalar()) {
            out.push(k.clone());
            if let Some(k) = super::aarch64::dotprod(k) {
                out.push(k);
            }
        }
    }
    out
}

/// The scalar reference table.
pub(crate) fn scalar() -> Kernels {
    let mut k = Kernels {
        name: "scalar",
        vec_dot: [None; N_TYPES],
        vec_dot_rows: [None; N_TYPES],
        gemm: [None; N_TYPES],
        matvec: [None; N_TYPES],
        x8_matvec: [None; N_TYPES],
        x8_gemm: [None; N_TYPES],
        quantize: [None; N_TYPES],
    };
    use GgmlType as T;
    let dots: [(T, VecDotFn); 13] = [
        (T::F32, dot_f32),
        (T::F16, f16::vec_dot),
        (T::BF16, bf16::vec_dot),
        (T::Q4_0, |w, a| q4_0::vec_dot(as_blocks(w), as_blocks(a))),
        (T::Q4_1, |w, a| q4_1::vec_dot(as_blocks(w), as_blocks(a))),
        (T::Q5_0, |w, a| q5_0::vec_dot(as_blocks(w), as_blocks(a))),
        (T::Q5_1, |w, a| q5_1::vec_dot(as_blocks(w), as_blocks(a))),
        (T::Q8_0, |w, a| q8_0::vec_dot(as_blocks(w), as_blocks(a))),
        (T::Q2K, |w, a| q2_k::vec_dot(as_blocks(w), as_blocks(a))),
        (T::Q3K, |w, a| q3_k::vec_dot(as_blocks(w), as_blocks(a))),
        (T::Q4K, |w, a| q4_k::vec_dot(as_blocks(w), as_blocks(a))),
        (T::Q5K, |w, a| q5_k::vec_dot(as_blocks(w), as_blocks(a))),
        (T::Q6K, |w, a| q6_k::vec_dot(as_blocks(w), as_blocks(a))),
    ];
    for (t, f) in dots {
        k.vec_dot[slot(t)] = Some(f);
    }
    let quants: [(T, QuantizeFn); 10] = [
        (T::F32, quantize_f32),
        (T::F16, f16::quantize),
        (T::BF16, bf16::quantize),
        (T::Q4_0, |x, y| q4_0::quantize(x, as_blocks_mut(y))),
        (T::Q4_1, |x, y| q4_1::quantize(x, as_blocks_mut(y))),
        (T::Q5_0, |x, y| q5_0::quantize(x, as_blocks_mut(y))),
        (T::Q5_1, |x, y| q5_1::quantize(x, as_blocks_mut(y))),
        (T::Q8_0, |x, y| q8_0::quantize(x, as_blocks_mut(y))),
        (T::Q8_1, |x, y| q8_1::quantize(x, as_blocks_mut(y))),
        (T::Q8K, |x, y| q8_k::quantize(x, as_blocks_mut(y))),
    ];
    for (t, f) in quants {
        k.quantize[slot(t)] = Some(f);
    }
    k
}

/// The dequantizer of a type (scalar; dequantization is off the hot path).
pub(crate) fn scalar_dequantize(ty: GgmlType) -> DequantizeFn {
    use GgmlType as T;
    match ty {
        T::F32 => dequantize_f32,
        T::F16 => f16::dequantize,
        T::BF16 => bf16::dequantize,
        T::Q4_0 => |x, y| q4_0::dequantize(as_blocks(x), y),
        T::Q4_1 => |x, y| q4_1::dequantize(as_blocks(x), y),
        T::Q5_0 => |x, y| q5_0::dequantize(as_blocks(x), y),
        T::Q5_1 => |x, y| q5_1::dequantize(as_blocks(x), y),
        T::Q8_0 => |x, y| q8_0::dequantize(as_blocks(x), y),
        T::Q8_1 => |x, y| q8_1::dequantize(as_blocks(x), y),
        T::Q2K => |x, y| q2_k::dequantize(as_blocks(x), y),
        T::Q3K => |x, y| q3_k::dequantize(as_blocks(x), y),
        T::Q4K => |x, y| q4_k::dequantize(as_blocks(x), y),
        T::Q5K => |x, y| q5_k::dequantize(as_blocks(x), y),
        T::Q6K => |x, y| q6_k::dequantize(as_blocks(x), y),
        T::Q8K => |x, y| q8_k::dequantize(as_blocks(x), y),
    }
}

fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(4).zip(dst.iter_mut()) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.iter().zip(dst.chunks_exact_mut(4)) {
        b.copy_from_slice(&x.to_le_bytes());
    }
}

/// F32 · F32, accumulated in f64 as ggml's generic `ggml_vec_dot_f32`.
fn dot_f32(w: &[u8], a: &[u8]) -> f32 {
    let mut sum = 0f64;
    for (x, y) in w.chunks_exact(4).zip(a.chunks_exact(4)) {
        let x = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
        let y = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        sum += (x * y) as f64;
    }
    sum as f32
}

/// Activation rows handed to one multi-row kernel call.
pub(crate) const ROWS: usize = 4;

/// Runs a multi-row kernel over `out.len()` activation rows: `ROWS` at a time, then one at a
/// time (the kernels give the same bits for every row count).
///
/// # Safety
/// The CPU must support the target features of `k1` and `kn`.
pub(crate) unsafe fn by_rows<W: Block, A: Block>(
    k1: unsafe fn(&[W], [&[A]; 1]) -> [f32; 1],
    kn: unsafe fn(&[W], [&[A]; ROWS]) -> [f32; ROWS],
    w: &[u8],
    acts: &[u8],
    stride: usize,
    row_bytes: usize,
    out: &mut [f32],
) {
    let w = as_blocks::<W>(w);
    let act = |i: usize| as_blocks::<A>(&acts[i * stride..i * stride + row_bytes]);
    let done = out.len() / ROWS * ROWS;
    let mut chunks = out.chunks_exact_mut(ROWS);
    for (c, o) in chunks.by_ref().enumerate() {
        // SAFETY: the caller guarantees the CPU features.
        o.copy_from_slice(&unsafe { kn(w, std::array::from_fn(|r| act(c * ROWS + r))) });
    }
    for (i, o) in chunks.into_remainder().iter_mut().enumerate() {
        // SAFETY: the caller guarantees the CPU features.
        *o = unsafe { k1(w, [act(done + i)]) }[0];
    }
}
