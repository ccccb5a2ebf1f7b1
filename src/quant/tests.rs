//! Tests of the whole module: dequantization against fixtures made by the `gguf` Python package
//! (`tools/quant-fixtures.py`), every SIMD variant against the scalar reference, scalar dot
//! products against f64 sums of dequantized values, and quantization round-trip error bounds.

use super::block::{as_blocks, f16_to_f32, f32_to_f16};
use super::dispatch::{self, slot, Kernels};
use super::q4_1::BlockQ4_1;
use super::q5_1::BlockQ5_1;
use super::q8_1::BlockQ8_1;
use super::q8_k::BlockQ8K;
use super::*;

/// Deterministic pseudo-random numbers (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    /// Roughly normal, times a random magnitude in [1e-2, 1e1].
    fn value(&mut self) -> f32 {
        let g = (0..4).map(|_| self.unit()).sum::<f32>();
        g * 10f32.powf(3.0 * (self.unit() + 1.0) / 2.0 - 2.0)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Byte offsets of the f16 scale fields in each weight block (as in tools/quant-fixtures.py).
fn scale_offsets(ty: GgmlType) -> &'static [usize] {
    use GgmlType as T;
    match ty {
        T::Q4_0 | T::Q5_0 | T::Q8_0 => &[0],
        T::Q4_1 | T::Q5_1 | T::Q4K | T::Q5K => &[0, 2],
        T::Q2K => &[80, 82],
        T::Q3K => &[108],
        T::Q6K => &[208],
        _ => &[],
    }
}

/// A random weight row of `n` elements: random quants, moderate f16 scales.
fn random_weights(ty: GgmlType, n: usize, rng: &mut Rng) -> Vec<u8> {
    if matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
        let x: Vec<f32> = (0..n).map(|_| rng.value()).collect();
        let mut out = vec![0u8; ty.bytes_for(n as u64).unwrap() as usize];
        quantize_row(ty, &x, &mut out);
        return out;
    }
    let mut w = rng.bytes(ty.bytes_for(n as u64).unwrap() as usize);
    for block in w.chunks_exact_mut(ty.block_bytes()) {
        for &o in scale_offsets(ty) {
            block[o..o + 2].copy_from_slice(&f32_to_f16(rng.unit() * 0.05));
        }
    }
    w
}

/// Random activations of `n` elements, quantized with the scalar reference to `ty`.
fn random_activations(ty: GgmlType, n: usize, rng: &mut Rng) -> (Vec<f32>, Vec<u8>) {
    let x: Vec<f32> = (0..n).map(|_| rng.value()).collect();
    let mut q = vec![0u8; ty.bytes_for(n as u64).unwrap() as usize];
    dispatch::scalar().quantize[slot(ty)].unwrap()(&x, &mut q);
    (x, q)
}

fn dequantized(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
    let n = bytes.len() / ty.block_bytes() * ty.block_elems();
    let mut out = vec![0f32; n];
    dequantize_row(ty, bytes, &mut out);
    out
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/quant/",
            $name
        ))
    };
}

/// Dequantization equals the `gguf` package's bit for bit for every type: both compute each
/// element with the same f32 operations in the same order (e.g. Q4_K `(d·sc)·q − dmin·m`,
/// Q6_K `(d·sc)·q`), and neither fuses multiply-adds, so no ulp tolerance is needed.
#[test]
fn dequantize_matches_gguf_python() {
    use GgmlType as T;
    let cases: [(T, &[u8], &[u8]); 12] = [
        (T::F16, fixture!("f16.bin"), fixture!("f16.f32")),
        (T::BF16, fixture!("bf16.bin"), fixture!("bf16.f32")),
        (T::Q4_0, fixture!("q4_0.bin"), fixture!("q4_0.f32")),
        (T::Q4_1, fixture!("q4_1.bin"), fixture!("q4_1.f32")),
        (T::Q5_0, fixture!("q5_0.bin"), fixture!("q5_0.f32")),
        (T::Q5_1, fixture!("q5_1.bin"), fixture!("q5_1.f32")),
        (T::Q8_0, fixture!("q8_0.bin"), fixture!("q8_0.f32")),
        (T::Q2K, fixture!("q2_K.bin"), fixture!("q2_K.f32")),
        (T::Q3K, fixture!("q3_K.bin"), fixture!("q3_K.f32")),
        (T::Q4K, fixture!("q4_K.bin"), fixture!("q4_K.f32")),
        (T::Q5K, fixture!("q5_K.bin"), fixture!("q5_K.f32")),
        (T::Q6K, fixture!("q6_K.bin"), fixture!("q6_K.f32")),
    ];
    for (ty, blocks, expected) in cases {
        let got = dequantized(ty, blocks);
        let want = f32s(expected);
        assert_eq!(got.len(), want.len(), "{ty}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{ty} element {i}: {g} != {w}");
        }
    }
}

/// The reference weight quantizers (and f16/bf16 conversion) equal the `gguf` package's, which
/// mirror ggml's `quantize_row_*_ref`.
#[test]
fn weight_quantizers_match_gguf_python() {
    use GgmlType as T;
    let src = f32s(fixture!("quantize_src.f32"));
    let cases: [(T, &[u8]); 6] = [
        (T::F16, fixture!("f16.quant.bin")),
        (T::BF16, fixture!("bf16.quant.bin")),
        (T::Q4_0, fixture!("q4_0.quant.bin")),
        (T::Q4_1, fixture!("q4_1.quant.bin")),
        (T::Q5_0, fixture!("q5_0.quant.bin")),
        (T::Q5_1, fixture!("q5_1.quant.bin")),
    ];
    for (ty, want) in cases {
        let mut got = vec![0u8; want.len()];
        quantize_row(ty, &src, &mut got);
        assert_eq!(got, want, "{ty}");
    }
    let mut got = vec![0u8; fixture!("q8_0.quant.bin").len()];
    quantize_row_q8_0_weights(&src, &mut got);
    assert_eq!(got, fixture!("q8_0.quant.bin"));
}

/// Q8_K has no Python dequantizer or quantizer: a hand-computed block. The largest magnitude
/// is negative, so iscale = -127 / -2 = 63.5; 1.0 · 63.5 = 63.5 is a tie and goes to even (64),
/// 0.5 · 63.5 = 31.75 rounds to 32.
#[test]
fn q8_k_quantize_known_block() {
    let mut x = [0f32; QK_K];
    x[0] = 1.0;
    x[1] = -2.0;
    x[2] = 0.5;
    x[17] = 2.0; // same magnitude as x[1] but later: x[1] sets the sign
    let mut q = vec![0u8; 292];
    quantize_row(GgmlType::Q8K, &x, &mut q);
    let b = &as_blocks::<BlockQ8K>(&q)[0];
    assert_eq!(b.d(), 1.0 / 63.5);
    assert_eq!(&b.qs[..3], &[64, -127, 32]);
    assert_eq!(b.qs[17], 127);
    assert_eq!(b.bsum(0), 64 - 127 + 32);
    assert_eq!(b.bsum(1), 127);
    assert!((2..16).all(|j| b.bsum(j) == 0));
    let mut back = [0f32; QK_K];
    dequantize_row(GgmlType::Q8K, &q, &mut back);
    assert_eq!(back[1], -127.0 / 63.5);
}

fn weight_types() -> Vec<GgmlType> {
    GgmlType::ALL
        .into_iter()
        .filter(|&t| has_vec_dot(t))
        .collect()
}

/// Bound on the f32 rounding of a dot product relative to the f64 sum of |w_i · a_i|, plus
/// (Q4_1/Q5_1) the f16 rounding of Q8_1's block sums `s`, which the minimum term multiplies.
fn tolerance(ty: GgmlType, w: &[u8], a: &[u8], abs_sum: f64, rel: f64) -> f64 {
    let ms: f64 = match ty {
        GgmlType::Q4_1 => as_blocks::<BlockQ4_1>(w)
            .iter()
            .zip(as_blocks::<BlockQ8_1>(a))
            .map(|(x, y)| (f16_to_f32(x.m) * f16_to_f32(y.s)).abs() as f64)
            .sum(),
        GgmlType::Q5_1 => as_blocks::<BlockQ5_1>(w)
            .iter()
            .zip(as_blocks::<BlockQ8_1>(a))
            .map(|(x, y)| (f16_to_f32(x.m) * f16_to_f32(y.s)).abs() as f64)
            .sum(),
        _ => 0.0,
    };
    rel * abs_sum + ms / 1024.0 + 1e-30
}

/// The scalar dot products compute Σ w_i · a_i of the dequantized rows: checks each format's
/// dot against its own dequantizer (layouts, offsets, scales, minimum terms).
#[test]
fn scalar_dot_matches_dequantized_sum() {
    let mut rng = Rng(1);
    let scalar = dispatch::scalar();
    for ty in weight_types() {
        for n in [256, 512, 4096] {
            let w = random_weights(ty, n, &mut rng);
            let (_, a) = random_activations(ty.vec_dot_type(), n, &mut rng);
            let (wd, ad) = (dequantized(ty, &w), dequantized(ty.vec_dot_type(), &a));
            let exact: f64 = wd.iter().zip(&ad).map(|(x, y)| *x as f64 * *y as f64).sum();
            let abs: f64 = wd
                .iter()
                .zip(&ad)
                .map(|(x, y)| (*x as f64 * *y as f64).abs())
                .sum();
            let got = scalar.vec_dot[slot(ty)].unwrap()(&w, &a) as f64;
            let tol = tolerance(ty, &w, &a, abs, 1e-5);
            assert!(
                (got - exact).abs() <= tol,
                "{ty} n={n}: {got} vs {exact} (tol {tol})"
            );
        }
    }
}

fn simd_variants() -> Vec<Kernels> {
    dispatch::available().into_iter().skip(1).collect()
}

/// Every SIMD variant against the scalar reference. K-quant kernels form the same exact integer
/// sums and combine them with the same f32 operations, so they must agree bit for bit; the
/// 32-element formats and F16 accumulate in eight (or 4×8) f32 lanes instead of one running
/// sum, so they differ by reassociation only: at most a few ulps of Σ|w_i·a_i| per block, here
/// bounded by 1e-5 relative to that sum (n ≤ 4128 gives ≤ 129 blocks, 129 · 2^-24 ≈ 8e-6).
#[test]
fn simd_vec_dot_matches_scalar() {
    let scalar = dispatch::scalar();
    for k in simd_variants() {
        let mut rng = Rng(2);
        for ty in weight_types() {
            let be = ty.block_elems().max(ty.vec_dot_type().block_elems());
            for blocks in [1, 2, 3, 7, 16] {
                let n = be * blocks;
                let w = random_weights(ty, n, &mut rng);
                let (_, a) = random_activations(ty.vec_dot_type(), n, &mut rng);
                let want = scalar.vec_dot[slot(ty)].unwrap()(&w, &a);
                let got = k.vec_dot[slot(ty)].unwrap()(&w, &a);
                let exact_bits = matches!(
                    ty,
                    GgmlType::Q2K | GgmlType::Q3K | GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K
                );
                if exact_bits {
                    assert_eq!(got.to_bits(), want.to_bits(), "{} {ty} n={n}", k.name);
                } else {
                    let (wd, ad) = (dequantized(ty, &w), dequantized(ty.vec_dot_type(), &a));
                    let abs: f64 = wd
                        .iter()
                        .zip(&ad)
                        .map(|(x, y)| (*x as f64 * *y as f64).abs())
                        .sum();
                    let tol = tolerance(ty, &w, &a, abs, 1e-5);
                    let diff = (got as f64 - want as f64).abs();
                    assert!(
                        diff <= tol,
                        "{} {ty} n={n}: {got} vs {want} (tol {tol})",
                        k.name
                    );
                }
            }
        }
    }
}

/// Activation quantizers of every variant produce the scalar reference's bytes, including
/// all-zero blocks, ties at .5 and single outliers.
#[test]
fn simd_quantize_matches_scalar_bit_for_bit() {
    let scalar = dispatch::scalar();
    for k in simd_variants() {
        let mut rng = Rng(3);
        for ty in [
            GgmlType::F16,
            GgmlType::BF16,
            GgmlType::Q8_0,
            GgmlType::Q8_1,
            GgmlType::Q8K,
        ] {
            for round in 0..20 {
                let n = 1024;
                let mut x: Vec<f32> = (0..n).map(|_| rng.value()).collect();
                match round % 4 {
                    0 => x[..QK_K].iter_mut().for_each(|v| *v = 0.0),
                    // Integers and halves with amax 127: exercises rounding ties exactly.
                    1 => x.iter_mut().enumerate().for_each(|(i, v)| {
                        *v = if i % 32 == 0 {
                            127.0
                        } else {
                            ((i % 255) as f32 - 127.0) / 2.0
                        }
                    }),
                    2 => x[rng.next() as usize % n] = -1e4,
                    _ => {}
                }
                let len = ty.bytes_for(n as u64).unwrap() as usize;
                let (mut want, mut got) = (vec![0u8; len], vec![0u8; len]);
                scalar.quantize[slot(ty)].unwrap()(&x, &mut want);
                k.quantize[slot(ty)].unwrap()(&x, &mut got);
                assert_eq!(got, want, "{} {ty} round {round}", k.name);
            }
        }
    }
}

/// Quantize → dequantize stays within each format's step size.
#[test]
fn round_trip_error_bounds() {
    use GgmlType as T;
    let mut rng = Rng(4);
    let n = 2048;
    for ty in GgmlType::ALL.into_iter().filter(|&t| can_quantize(t)) {
        let x: Vec<f32> = (0..n).map(|_| rng.value()).collect();
        let mut q = vec![0u8; ty.bytes_for(n as u64).unwrap() as usize];
        quantize_row(ty, &x, &mut q);
        let y = dequantized(ty, &q);
        let be = ty.block_elems();
        for (bi, (xb, yb)) in x.chunks(be).zip(y.chunks(be)).enumerate() {
            let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
            let (min, max) = xb
                .iter()
                .fold((f32::MAX, f32::MIN), |(a, b), &v| (a.min(v), b.max(v)));
            let f16_err = (amax / 1024.0) as f64; // one f16 rounding of a scale or minimum
            for (i, (&a, &b)) in xb.iter().zip(yb).enumerate() {
                let err = (a - b).abs() as f64;
                let bound = match ty {
                    T::F32 => 0.0,
                    // Relative 2^-11, or half the subnormal spacing 2^-24.
                    T::F16 => (a.abs() as f64 / 2048.0).max(2f64.powi(-25)),
                    T::BF16 => a.abs() as f64 / 256.0,
                    // Half a step of amax/127; the scale is stored as f16.
                    T::Q8_0 | T::Q8_1 => amax as f64 / 254.0 + f16_err,
                    T::Q8K => amax as f64 / 254.0 * 1.0001,
                    // Steps of amax/8 (amax/16); the positive end clamps, costing one step.
                    T::Q4_0 => amax as f64 / 8.0 + f16_err,
                    T::Q5_0 => amax as f64 / 16.0 + f16_err,
                    T::Q4_1 => (max - min) as f64 / 30.0 + 2.0 * f16_err,
                    T::Q5_1 => (max - min) as f64 / 62.0 + 2.0 * f16_err,
                    _ => unreachable!("{ty} has no quantizer"),
                };
                assert!(
                    err <= bound * 1.001,
                    "{ty} block {bi} elem {i}: {a} -> {b}, bound {bound}"
                );
            }
        }
    }
}

/// Whether `pack_acts` lays activations out as `k`'s gemm for `ty` reads them: the AVX-512
/// K-quant tiles read token groups, which are packed only when AVX-512 is the variant in use
/// (`LLAMAFILE_CPU=avx2` chooses another), so those tiles are checked only then.
fn packs_for(k: &dispatch::Kernels, ty: GgmlType) -> bool {
    !(matches!(ty, GgmlType::Q4K | GgmlType::Q6K)
        && k.name == "avx512"
        && dispatch::kernels().name != "avx512")
}

/// Multi-row dot products give each row exactly the bits of the single-row kernel, for every
/// variant and for row counts that exercise full groups and remainders.
#[test]
fn vec_dot_rows_equals_vec_dot() {
    let mut rng = Rng(5);
    for k in dispatch::available() {
        for ty in weight_types() {
            let n = 512;
            let at = ty.vec_dot_type();
            let row = at.bytes_for(n as u64).unwrap() as usize;
            let stride = row + 6;
            let w = random_weights(ty, n, &mut rng);
            let mut acts = vec![0u8; stride * 9];
            for r in 0..9 {
                let (_, a) = random_activations(at, n, &mut rng);
                acts[r * stride..r * stride + row].copy_from_slice(&a);
            }
            let single = k.vec_dot[slot(ty)].unwrap();
            let want: Vec<f32> = (0..9)
                .map(|r| single(&w, &acts[r * stride..][..row]))
                .collect();
            for rows in [1, 3, 4, 9] {
                let mut out = vec![0f32; rows];
                match k.vec_dot_rows[slot(ty)] {
                    Some(f) => f(&w, &acts, stride, row, &mut out),
                    // The facade's fallback loops over the variant in use.
                    None if k.name == kernel_variant() => {
                        vec_dot_rows(ty, n, &w, &acts, stride, &mut out)
                    }
                    None => continue,
                }
                for (r, o) in out.iter().enumerate() {
                    assert_eq!(
                        o.to_bits(),
                        want[r].to_bits(),
                        "{} {ty} row {r}/{rows}",
                        k.name
                    );
                }
            }
        }
    }
}

#[test]
fn tables_follow_the_cpu_authority() {
    let names: Vec<_> = dispatch::available().iter().map(|k| k.name).collect();
    let isas: Vec<_> = crate::cpu::available().iter().map(|i| i.name()).collect();
    assert_eq!(names, isas);
    assert_eq!(kernel_variant(), crate::cpu::isa().name());
}

#[test]
#[should_panic(expected = "weight bytes")]
fn vec_dot_rejects_wrong_lengths() {
    let w = vec![0u8; 18];
    let a = vec![0u8; 34];
    vec_dot(GgmlType::Q4_0, 64, &w, &a);
}

/// Tile kernels give every (weight row, token) the single-row kernel's bits, for every
/// variant that has them: odd token counts (a padded last pair), row counts off the tile size,
/// sub-ranges of pairs and transposed output strides.
#[test]
fn gemm_equals_vec_dot() {
    let mut rng = Rng(11);
    let mut checked = 0;
    for k in dispatch::available() {
        for ty in weight_types() {
            let Some(f) = k.gemm[slot(ty)].filter(|_| packs_for(&k, ty)) else {
                continue;
            };
            let single = k.vec_dot[slot(ty)].unwrap();
            let k_quant = ty.block_elems() == QK_K;
            let cases: &[(usize, usize, usize)] = if k_quant {
                &[(256, 1, 1), (512, 7, 5), (768, 9, 14)]
            } else if ty.block_elems() == 1 {
                // 16-bit weights: long rows make several of the tile loop's row blocks and
                // (AVX2) k-chunks, 1100 a tail after its chunks.
                &[
                    (32, 1, 1),
                    (96, 7, 5),
                    (320, 9, 14),
                    (16384, 29, 7),
                    (1100, 5, 8),
                ]
            } else {
                &[(32, 1, 1), (96, 7, 5), (320, 9, 14), (64, 10, 19)]
            };
            for &(n, rows, tokens) in cases {
                let at = ty.vec_dot_type();
                let arow = at.bytes_for(n as u64).unwrap() as usize;
                let wrow = ty.bytes_for(n as u64).unwrap() as usize;
                let w: Vec<u8> = (0..rows)
                    .flat_map(|_| random_weights(ty, n, &mut rng))
                    .collect();
                let acts: Vec<u8> = (0..tokens)
                    .flat_map(|_| random_activations(at, n, &mut rng).1)
                    .collect();
                let packed = pack_acts(ty, n, &acts, tokens);
                let pairs = packed.n_pairs();
                for range in [0..pairs, pairs / 2..pairs] {
                    let t0 = 2 * range.start;
                    let nt = tokens - t0;
                    // Token-major, then row-major output.
                    for (ts, rs) in [(rows, 1), (1, nt)] {
                        let mut out = vec![f32::NAN; nt * rows];
                        f(&w, rows, &packed, range.clone(), &mut out, ts, rs);
                        for t in 0..nt {
                            for r in 0..rows {
                                let want = single(
                                    &w[r * wrow..][..wrow],
                                    &acts[(t0 + t) * arow..][..arow],
                                );
                                let got = out[t * ts + r * rs];
                                assert_eq!(
                                    got.to_bits(),
                                    want.to_bits(),
                                    "{} {ty} n={n} row {r} token {}",
                                    k.name,
                                    t0 + t
                                );
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    let has_tiles = dispatch::available()
        .iter()
        .any(|k| k.gemm.iter().any(Option::is_some));
    assert!(!has_tiles || checked > 0);
}

/// Matrix-vector kernels give every weight row the single-row kernel's bits, for row counts
/// with and without a remainder of the four-row step.
#[test]
fn matvec_equals_vec_dot() {
    let mut rng = Rng(13);
    let mut checked = 0;
    for k in dispatch::available() {
        for ty in weight_types() {
            let Some(f) = k.matvec[slot(ty)] else {
                continue;
            };
            let single = k.vec_dot[slot(ty)].unwrap();
            let cases: [(usize, usize); 5] = if ty.block_elems() == QK_K {
                [(256, 1), (512, 7), (768, 12), (256, 19), (1024, 33)]
            } else {
                [(32, 1), (96, 7), (320, 12), (32, 19), (128, 33)]
            };
            for (n, rows) in cases {
                let at = ty.vec_dot_type();
                let wrow = ty.bytes_for(n as u64).unwrap() as usize;
                let w: Vec<u8> = (0..rows)
                    .flat_map(|_| random_weights(ty, n, &mut rng))
                    .collect();
                let (_, act) = random_activations(at, n, &mut rng);
                let packed = pack_single(ty, n, &act);
                let mut out = vec![f32::NAN; rows];
                f(&w, &packed, &mut out);
                for (r, got) in out.iter().enumerate() {
                    let want = single(&w[r * wrow..][..wrow], &act);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{} {ty} n={n} row {r}",
                        k.name
                    );
                    checked += 1;
                }
            }
        }
    }
    let has = dispatch::available()
        .iter()
        .any(|k| k.matvec.iter().any(Option::is_some));
    assert!(!has || checked > 0);
}

/// Tiles of every format for every token count from 1 to 19 (whole and partial tiles of two,
/// three and four tokens, one or several token pairs) and row counts below, at and off the tile
/// heights (four and eight rows): each (row, token) has `vec_dot`'s bits.
#[test]
fn gemm_equals_vec_dot_small_batches() {
    let mut rng = Rng(17);
    let mut checked = 0;
    for k in dispatch::available() {
        for ty in weight_types() {
            let Some(f) = k.gemm[slot(ty)].filter(|_| packs_for(&k, ty)) else {
                continue;
            };
            let single = k.vec_dot[slot(ty)].unwrap();
            let n = if ty.block_elems() == QK_K { 512 } else { 96 };
            let at = ty.vec_dot_type();
            let arow = at.bytes_for(n as u64).unwrap() as usize;
            let wrow = ty.bytes_for(n as u64).unwrap() as usize;
            for rows in [3usize, 4, 8, 19] {
                let w: Vec<u8> = (0..rows)
                    .flat_map(|_| random_weights(ty, n, &mut rng))
                    .collect();
                for tokens in 1..=19usize {
                    let acts: Vec<u8> = (0..tokens)
                        .flat_map(|_| random_activations(at, n, &mut rng).1)
                        .collect();
                    let packed = pack_acts(ty, n, &acts, tokens);
                    let pairs = packed.n_pairs();
                    let mut out = vec![f32::NAN; tokens * rows];
                    f(&w, rows, &packed, 0..pairs, &mut out, 1, tokens);
                    for t in 0..tokens {
                        for r in 0..rows {
                            let want = single(&w[r * wrow..][..wrow], &acts[t * arow..][..arow]);
                            let got = out[t + r * tokens];
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "{} {ty} rows={rows} tokens={tokens} row {r} token {t}",
                                k.name
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    let has = dispatch::available()
        .iter()
        .any(|k| k.gemm.iter().any(Option::is_some));
    assert!(!has || checked > 0);
}

/// Timing of the K-quant and 16-bit kernels in use (not a check): `cargo test --release --lib
/// kernel_timing -- --ignored --nocapture`.
#[test]
#[ignore]
fn kernel_timing() {
    let mut rng = Rng(5);
    let k = dispatch::kernels();
    // 2048 columns: 1024 rows come from L3, 128 rows stay in L2 (the kernels' own speed).
    let n = 2048usize;
    let rows: usize = std::env::var("KERNEL_TIMING_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::F16,
        GgmlType::BF16,
    ] {
        let at = ty.vec_dot_type();
        let arow = at.bytes_for(n as u64).unwrap() as usize;
        let wrow = ty.bytes_for(n as u64).unwrap() as usize;
        let w: Vec<u8> = (0..rows)
            .flat_map(|_| random_weights(ty, n, &mut rng))
            .collect();
        for tokens in [1usize, 2, 4, 8, 64] {
            let acts: Vec<u8> = (0..tokens)
                .flat_map(|_| random_activations(at, n, &mut rng).1)
                .collect();
            let mut out = vec![0f32; tokens * rows];
            let reps = (256 / tokens).max(4);
            let time = |f: &mut dyn FnMut(&mut [f32])| {
                // The best of many short trials: the machine may be shared, and a trial the
                // scheduler interrupted says nothing about the kernel.
                let mut out = out.clone();
                let mut best = f64::INFINITY;
                let reps = (reps / 16).max(1);
                for _ in 0..80 {
                    let t0 = std::time::Instant::now();
                    for _ in 0..reps {
                        f(&mut out);
                    }
                    best = best.min(t0.elapsed().as_secs_f64() / reps as f64 * 1e3);
                }
                best
            };
            let rows_ms = time(&mut |o| {
                for r in 0..rows {
                    let wr = &w[r * wrow..][..wrow];
                    vec_dot_rows(ty, n, wr, &acts, arow, &mut o[r * tokens..][..tokens]);
                }
            });
            let packed = pack_acts(ty, n, &acts, tokens);
            let gemm_ms = k.gemm[slot(ty)]
                .map(|f| time(&mut |o| f(&w, rows, &packed, 0..packed.n_pairs(), o, 1, tokens)));
            let mv_ms = (tokens == 1)
                .then_some(())
                .and(k.matvec[slot(ty)])
                .map(|f| {
                    let p = pack_single(ty, n, &acts);
                    time(&mut |o| f(&w, &p, o))
                });
            #[cfg(target_arch = "x86_64")]
            let tile_ms = (tokens == 1)
                .then_some(())
                .and(super::x86::tile_matvec(ty))
                .map(|f| {
                    let p = pack_single(ty, n, &acts);
                    time(&mut |o| f(&w, &p, o))
                });
            #[cfg(not(target_arch = "x86_64"))]
            let tile_ms: Option<f64> = None;
            out[0] = 0.0;
            println!(
                "{} {ty} {rows}x{n} tokens={tokens}: vec_dot_rows {rows_ms:.4} ms, gemm {gemm_ms:.4?} ms, matvec {mv_ms:.4?} ms, tile as matvec {tile_ms:.4?} ms",
                k.name
            );
        }
    }
}

/// Activations for F16 and BF16 weights, rounded and widened back in one step (F16C eight at a
/// time where the CPU has it), equal each element's own rounding, tails and edge values too.
#[test]
fn round_trip_rows_equal_element_rounding() {
    let mut xs: Vec<f32> = (0..4000u32)
        .map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761) % 0x7f80_0000) * 1.0e-9)
        .collect();
    xs.extend([
        65504.0, 65519.0, 65520.0, -65520.0, 6.0e-8, -3.0e-8, 1.0e-10,
    ]);
    xs.extend([
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.000_976_6,
        1.000_488_3,
    ]);
    let mut scratch = Vec::new();
    for len in [xs.len(), 37, 8, 3] {
        let src = &xs[xs.len() - len..];
        for ty in [GgmlType::F16, GgmlType::BF16] {
            let mut got = vec![f32::NAN; len];
            super::round_trip_row(ty, src, &mut got, &mut scratch);
            for (x, g) in src.iter().zip(&got) {
                let want = if ty == GgmlType::F16 {
                    super::f16_to_f32(super::f32_to_f16(*x))
                } else {
                    super::bf16_to_f32(super::f32_to_bf16(*x))
                };
                assert_eq!(g.to_bits(), want.to_bits(), "{ty} {x}");
            }
        }
    }
}
