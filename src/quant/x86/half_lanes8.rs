//! F16 and BF16 weight products in tinyBLAS's AVX2 order (llama.cpp's `llamafile/sgemm.cpp`,
//! which its AVX2 build runs for these weights whenever a row's length is a multiple of eight):
//! one 8-lane FMA accumulator per weight row and token, element `i` in lane `i % 8`, reduced
//! by [`hsum_f32_8`] (tinyBLAS's `hsum`). With one accumulator per product, a tile of rows ×
//! tokens needs only one register per product, so tiles can be wider than in `ggml_vec_dot_f16`'s
//! order (four accumulators per product): each widened weight vector serves more tokens.
//!
//! The AVX-512 tables run the same 256-bit operations, with the sixteen more registers AVX-512
//! VL gives for wider tiles, so both give the same bits.

use std::arch::x86_64::*;

use super::common::hsum_f32_8;
use super::half::{Acts, Half};

/// Elements per accumulator: rows whose length is a multiple of this take this order.
pub(super) const LANES: usize = 8;

/// `out[r][t]` = the product of weight row `w[r]` and activation row `x[t]` (`n` elements each,
/// `n` a multiple of [`LANES`]).
///
/// # Safety
/// `w` and `x` hold `n` elements each (2 and 4 bytes); the CPU must support AVX2, FMA, F16C.
// Indexing reads better than iterators over two array dimensions at once.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub(super) unsafe fn tile<H: Half, X: Acts, const R: usize, const T: usize>(
    w: [*const u8; R],
    x: [X; T],
    n: usize,
    out: &mut [[f32; T]; R],
) {
    debug_assert!(n.is_multiple_of(LANES));
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    let mut i = 0;
    // SAFETY: offsets stay below `n` elements, which the caller guarantees.
    unsafe {
        while i < n {
            let xv: [__m256; T] = std::array::from_fn(|t| x[t].load8(i));
            for r in 0..R {
                let wv = H::widen8(w[r].add(2 * i));
                for t in 0..T {
                    acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
                }
            }
            i += LANES;
        }
        for r in 0..R {
            for t in 0..T {
                out[r][t] = hsum_f32_8(acc[r][t]);
            }
        }
    }
}

/// [`tile`] in 512-bit registers: two weight rows side by side in one register (lanes 0-7 row
/// `2p`, lanes 8-15 row `2p + 1`) against each token's eight elements in both halves, so each
/// half is one of [`tile`]'s accumulators and the bits are the same. An odd `R` runs [`tile`].
///
/// # Safety
/// As for [`tile`]; the CPU must also support AVX-512 F and DQ.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
pub(super) unsafe fn tile_pairs<H: Half, X: Acts, const R: usize, const T: usize>(
    w: [*const u8; R],
    x: [X; T],
    n: usize,
    out: &mut [[f32; T]; R],
) {
    if R % 2 == 1 {
        // SAFETY: forwarded from the caller.
        return unsafe { tile::<H, X, R, T>(w, x, n, out) };
    }
    debug_assert!(n.is_multiple_of(LANES));
    let pairs = R / 2;
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    let mut i = 0;
    // SAFETY: offsets stay below `n` elements, which the caller guarantees.
    unsafe {
        while i < n {
            let xv: [__m512; T] = std::array::from_fn(|t| _mm512_broadcast_f32x8(x[t].load8(i)));
            for p in 0..pairs {
                let wv = H::widen8_pair(w[2 * p].add(2 * i), w[2 * p + 1].add(2 * i));
                for t in 0..T {
                    acc[p][t] = _mm512_fmadd_ps(wv, xv[t], acc[p][t]);
                }
            }
            i += LANES;
        }
        for p in 0..pairs {
            for t in 0..T {
                let a = acc[p][t];
                out[2 * p][t] = hsum_f32_8(_mm512_castps512_ps256(a));
                out[2 * p + 1][t] = hsum_f32_8(_mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(
                    _mm512_castps_pd(a),
                )));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::quant::dispatch::{self, slot};
    use crate::quant::gemm::pack_single;
    use crate::quant::{dequantize_row, quantize_row, GgmlType};

    /// tinyBLAS's order written out in scalar f32: lane `i % 8` takes `w_i · a_i` by a fused
    /// multiply-add, then `hsum`: the two halves added lane by lane, then lanes 0 + 2 and
    /// 1 + 3, then those two.
    fn lanes8_order(w: &[f32], a: &[f32]) -> f32 {
        let mut lanes = [0f32; 8];
        for (i, (x, y)) in w.iter().zip(a).enumerate() {
            lanes[i % 8] = x.mul_add(*y, lanes[i % 8]);
        }
        let r: [f32; 4] = std::array::from_fn(|j| lanes[j + 4] + lanes[j]);
        (r[0] + r[2]) + (r[1] + r[3])
    }

    /// `ggml_vec_dot_f16`'s AVX2 order written out: four 8-lane accumulators per 32 elements,
    /// 8-element steps into the first, `(a0 + a1) + (a2 + a3)`, `hsum`, then the tail.
    fn ggml_order(w: &[f32], a: &[f32]) -> f32 {
        let n = w.len();
        let mut acc = [[0f32; 8]; 4];
        let main = n / 32 * 32;
        for i in 0..main {
            let k = i / 8 % 4;
            acc[k][i % 8] = w[i].mul_add(a[i], acc[k][i % 8]);
        }
        let steps = main + (n - main) / 8 * 8;
        for i in main..steps {
            acc[0][i % 8] = w[i].mul_add(a[i], acc[0][i % 8]);
        }
        let lanes: [f32; 8] =
            std::array::from_fn(|l| (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]));
        let r: [f32; 4] = std::array::from_fn(|j| lanes[j + 4] + lanes[j]);
        let mut s = (r[0] + r[2]) + (r[1] + r[3]);
        for i in steps..n {
            s += w[i] * a[i];
        }
        s
    }

    fn row(ty: GgmlType, n: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
        let mut s = seed;
        let x: Vec<f32> = (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
            })
            .collect();
        let mut bytes = vec![0u8; 2 * n];
        quantize_row(ty, &x, &mut bytes);
        let mut back = vec![0f32; n];
        dequantize_row(ty, &bytes, &mut back);
        (bytes, back)
    }

    /// Every x86 table's F16 and BF16 dot product and matrix-vector kernel takes tinyBLAS's
    /// order when the rows' length is a multiple of eight and ggml's `vec_dot_f16` order
    /// otherwise, bit for bit (the two orders differ on these rows, so a kernel in the wrong
    /// one fails).
    #[test]
    fn half_products_take_tinyblas_order_on_whole_lanes() {
        let mut checked = 0;
        for k in dispatch::available()
            .into_iter()
            .filter(|k| k.name.starts_with("avx"))
        {
            for ty in [GgmlType::F16, GgmlType::BF16] {
                for n in [8, 64, 776, 3072, 33, 100, 1100] {
                    let (w, wf) = row(ty, n, n as u64);
                    let (a, af) = row(ty, n, 7 * n as u64 + 1);
                    let want = if n % 8 == 0 {
                        let (tb, gg) = (lanes8_order(&wf, &af), ggml_order(&wf, &af));
                        assert!(
                            n < 776 || tb.to_bits() != gg.to_bits(),
                            "orders agree at {n}"
                        );
                        tb
                    } else {
                        ggml_order(&wf, &af)
                    };
                    let got = k.vec_dot[slot(ty)].unwrap()(&w, &a);
                    assert_eq!(got.to_bits(), want.to_bits(), "{} {ty} dot n={n}", k.name);
                    let rows = 9;
                    let ws: Vec<u8> = (0..rows).flat_map(|_| w.iter().copied()).collect();
                    let packed = pack_single(ty, n, &a);
                    let mut out = vec![0f32; rows];
                    k.matvec[slot(ty)].unwrap()(&ws, &packed, &mut out);
                    for v in out {
                        assert_eq!(v.to_bits(), want.to_bits(), "{} {ty} matvec n={n}", k.name);
                    }
                    checked += 1;
                }
            }
        }
        if crate::cpu::supports(crate::cpu::Isa::Avx2) {
            assert!(checked > 0);
        }
    }
}
