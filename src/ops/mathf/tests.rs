//! `mathf` against glibc itself (`f32::sin` and friends call the C library's `sinf`, `cosf`,
//! `expf` on Linux), on x86-64 CPUs with FMA and AVX2, where glibc runs the variants
//! `mathf` reproduces.

use super::{cosf, expf, sinf};

/// Values checked by hand, on any platform.
#[test]
fn known_values() {
    assert_eq!(sinf(0.0).to_bits(), 0);
    assert_eq!(sinf(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(cosf(0.0), 1.0);
    assert_eq!(expf(0.0), 1.0);
    assert_eq!(expf(1.0), std::f32::consts::E);
    assert_eq!(expf(f32::NEG_INFINITY), 0.0);
    assert_eq!(expf(f32::INFINITY), f32::INFINITY);
    assert_eq!(expf(89.0), f32::INFINITY);
    assert_eq!(expf(-104.0), 0.0);
    assert_eq!(expf(-100.0).to_bits(), 27); // e^-100 = 26.5 times the least subnormal
    assert!(sinf(f32::INFINITY).is_nan() && cosf(f32::NAN).is_nan() && expf(f32::NAN).is_nan());
    for &x in &[0.5f32, 1.0, 2.0, 3.0, 100.0, 1e6, 3e38, -7.25] {
        let (s, c) = (f64::from(sinf(x)), f64::from(cosf(x)));
        let (ws, wc) = f64::from(x).sin_cos();
        assert!(
            (s - ws).abs() < 1.2e-7 && (c - wc).abs() < 1.2e-7,
            "{x}: {s} {c}"
        );
    }
}

/// The emulated fused multiply-add against glibc's `fma` (correctly rounded; mingw's is not),
/// on random operands of the magnitudes the functions use, cancellations included.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn emulated_fma_is_exact() {
    use super::{Emulated, Fused};
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..5_000_000u32 {
        // Exponents in [-60, 20), any mantissa and sign.
        let mut operand = || {
            let bits = next();
            f64::from_bits((bits & 0x800f_ffff_ffff_ffff) | ((1023 - 60 + (bits >> 52) % 80) << 52))
        };
        let (a, b) = (operand(), operand());
        // Every fourth addend nearly cancels the product.
        let c = if i % 4 == 0 {
            -(a * b) * (1.0 + f64::EPSILON * (i % 7) as f64)
        } else {
            operand()
        };
        let (ours, exact) = (Emulated::mul_add(a, b, c), a.mul_add(b, c));
        assert_eq!(ours.to_bits(), exact.to_bits(), "fma({a:e}, {b:e}, {c:e})");
    }
}

/// With the fused steps emulated (x86-64 CPUs without FMA, other platforms) the functions
/// give the same bits as with the instruction, on every input of the engine's ranges (see
/// `against_glibc`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn emulated_matches_hardware() {
    use super::{exp, sin_or_cos, Emulated, Hardware, Want};
    let (lo, hi) = (0x3900_0000u32, 0x4780_0000u32); // 2^-13, 2^16
    for sign in [0, 0x8000_0000u32] {
        for b in (sign | lo..sign | hi).step_by(5) {
            let x = f32::from_bits(b);
            for want in [Want::Sin, Want::Cos] {
                let (e, h) = (
                    sin_or_cos::<Emulated>(x, want),
                    sin_or_cos::<Hardware>(x, want),
                );
                assert_eq!(e.to_bits(), h.to_bits(), "{x:e}");
            }
            let (e, h) = (exp::<Emulated>(x), exp::<Hardware>(x));
            assert_eq!(e.to_bits(), h.to_bits(), "exp {x:e}");
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu", target_arch = "x86_64"))]
mod against_glibc {
    use super::{cosf, expf, sinf};

    /// glibc runs its FMA variants only on a CPU with FMA and AVX2; the reference outputs were
    /// made on such CPUs. Elsewhere glibc itself rounds differently, so there is nothing to
    /// compare with.
    fn glibc_uses_fma() -> bool {
        let yes = std::is_x86_feature_detected!("fma") && std::is_x86_feature_detected!("avx2");
        if !yes {
            eprintln!("mathf: not compared with glibc: this CPU lacks FMA or AVX2, so glibc runs its non-FMA sinf/cosf/expf");
        }
        yes
    }

    /// The input with bits `b`, if ours and glibc's differ on it: which function and how.
    fn difference(b: u32) -> Option<String> {
        let x = f32::from_bits(b);
        for (name, ours, theirs) in [
            ("sinf", sinf(x), x.sin()),
            ("cosf", cosf(x), x.cos()),
            ("expf", expf(x), x.exp()),
        ] {
            if ours.to_bits() != theirs.to_bits() {
                return Some(format!(
                    "{name}({x:e} = {b:#010x}): ours {:#010x} ({ours:e}), glibc {:#010x} ({theirs:e})",
                    ours.to_bits(),
                    theirs.to_bits()
                ));
            }
        }
        None
    }

    /// Every input with bits in `bits`: the first difference.
    fn first_difference(bits: std::ops::Range<u32>) -> Option<String> {
        bits.into_iter().find_map(difference)
    }

    /// Every f32 from 2^-13 to 2^16 of either sign: RoPE's angles (positions up to 65536 times
    /// frequencies up to 1) and attention's softmax arguments (score differences, <= 0), with
    /// the thresholds between the functions' branches (0.75, 128, 88) inside.
    #[test]
    fn engine_ranges_match_glibc() {
        if !glibc_uses_fma() {
            return;
        }
        let (lo, hi) = (0x3900_0000u32, 0x4780_0000u32); // 2^-13, 2^16
        for sign in [0, 0x8000_0000u32] {
            let found = first_difference(sign | lo..sign | hi);
            assert!(found.is_none(), "{}", found.unwrap());
        }
    }

    /// A few million random bit patterns over the whole range: NaNs, infinities, subnormals and
    /// the huge arguments of the 4/π reduction included.
    #[test]
    fn random_bits_match_glibc() {
        if !glibc_uses_fma() {
            return;
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..4_000_000 {
            // splitmix64
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let b = ((z ^ (z >> 31)) >> 32) as u32;
            let found = difference(b);
            assert!(found.is_none(), "{}", found.unwrap());
        }
        let edges = [
            0,
            1,
            0x007f_ffff,
            0x0080_0000,
            0x7f7f_ffff,
            0x7f80_0000,
            0x7f80_0001,
            0x7fc0_0000,
            0x7fff_ffff,
        ];
        for b in edges {
            for sign in [0, 0x8000_0000u32] {
                let found = difference(sign | b);
                assert!(found.is_none(), "{}", found.unwrap());
            }
        }
    }

    /// Every one of the 2^32 inputs, with the instruction and emulated, by hand (minutes): `LLAMAFILE_MATHF_SWEEP=FIRST..END` in
    /// hex bits narrows it, e.g. `0..80000000` for the positive half.
    #[test]
    #[ignore]
    fn every_input_matches_glibc() {
        if !glibc_uses_fma() {
            return;
        }
        let (first, end) = match std::env::var("LLAMAFILE_MATHF_SWEEP") {
            Ok(r) => {
                let (a, b) = r
                    .split_once("..")
                    .expect("LLAMAFILE_MATHF_SWEEP=FIRST..END");
                let hex = |s: &str| u64::from_str_radix(s, 16).expect("hex bits");
                (hex(a), hex(b))
            }
            Err(_) => (0, 1 << 32),
        };
        use super::super::{exp, sin_or_cos, Emulated, Want};
        for b in first..end {
            if let Some(found) = difference(b as u32) {
                panic!("{found}");
            }
            // The emulated fused steps too.
            let x = f32::from_bits(b as u32);
            let e = [
                sin_or_cos::<Emulated>(x, Want::Sin),
                sin_or_cos::<Emulated>(x, Want::Cos),
                exp::<Emulated>(x),
            ];
            let glibc = [x.sin(), x.cos(), x.exp()];
            assert!(
                e.iter()
                    .zip(&glibc)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "emulated, {x:e} ({b:#x}): {e:?} against {glibc:?}"
            );
        }
        eprintln!(
            "mathf: {:#x}..{end:#x}: every input the same as glibc",
            first
        );
    }
}
