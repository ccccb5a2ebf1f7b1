//! The float orders of the SIMD tables' F16 and BF16 weight products, pinned against scalar
//! transcriptions: tinyBLAS's 8-lane order for rows whose length is a multiple of eight,
//! `ggml_vec_dot_f16`'s AVX2 order for the others (`x86/half.rs`, `aarch64/half.rs`).

use super::dispatch::{self, slot};
use super::gemm::pack_single;
use super::{dequantize_row, quantize_row, GgmlType};

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

/// Every SIMD table's F16 and BF16 dot product and matrix-vector kernel takes tinyBLAS's
/// order when the rows' length is a multiple of eight and ggml's `vec_dot_f16` order
/// otherwise, bit for bit (the two orders differ on these rows, so a kernel in the wrong
/// one fails).
#[test]
fn half_products_take_tinyblas_order_on_whole_lanes() {
    let mut checked = 0;
    for k in dispatch::available()
        .into_iter()
        .filter(|k| k.name != "scalar")
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
    if dispatch::available().len() > 1 {
        assert!(checked > 0);
    }
}
