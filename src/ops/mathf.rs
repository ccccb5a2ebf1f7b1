//! Single-precision `sin`, `cos` and `exp` that give the same bits as glibc 2.36's `sinf`,
//! `cosf` and `expf` on x86-64 CPUs with FMA, for every `f32` input, on every platform.
//!
//! ggml calls the C library for RoPE's angles and for the softmax of its scalar attention, and
//! the reference outputs we are held to were made with glibc on FMA CPUs. Windows' C runtime
//! rounds some of these differently in the last bit, and SmolLM2 turns a one-ulp change into a
//! different token at a near-tie, so the engine calls these instead of the platform's libm.
//!
//! The design is glibc's (from Arm's optimized-routines), written anew here: everything is
//! evaluated in `f64` and rounded to `f32` once. `sin`/`cos` reduce the argument by multiples
//! of π/2 (one fused multiply-subtract below 128, a 4/π table of 192 bits above), then evaluate
//! a short odd (sine) or even (cosine) polynomial chosen by the quadrant. `exp` splits
//! `x·32/ln 2` into an integer `k` and a remainder `r`, takes `2^(k/32)` from a 32-entry table
//! with `k/32`'s integer part added to the exponent, and multiplies it by a cubic in `r`.
//! glibc's x86-64 build picks a variant compiled for FMA at run time (`__sinf_fma`, ...), in
//! which GCC fuses each `a*b + c` whose product feeds only additions: those are the
//! `F::mul_add`s below, one for one (rounding those products first changes a few results in
//! every hundred million: measured, see `tests`). The constants (polynomial coefficients, the table, the
//! bits of 4/π) are the facts that bit-compatibility needs.
//!
//! On x86-64 the functions run a copy compiled with FMA when the CPU variant `crate::cpu` chose
//! has it (so `LLAMAFILE_CPU=scalar` takes the portable copy, with the same bits), and on
//! aarch64 (which always has it) the instruction. Elsewhere, and on x86-64 variants without
//! FMA, each fused step is emulated exactly ([`Emulated`]): not the C library's `fma`, since mingw's rounds
//! some results wrongly in the last bit. `tests` compares every input of the ranges the engine
//! uses, and a few million random bit patterns, with glibc itself on x86-64 Linux, and the
//! emulated steps with the instruction.

/// `2/π · 2^24`: the quadrant of `x` ends up in bits 24 and up of `x · HPI_INV`.
const HPI_INV: f64 = f64::from_bits(0x4164_5f30_6dc9_c883); // 0x1.45f306dc9c883p+23
/// π/2 rounded to double.
const HPI: f64 = f64::from_bits(0x3ff9_21fb_5444_2d18); // 0x1.921fb54442d18p0
/// 2π · 2^-64: scales the 2.62 fixed-point remainder of the large-argument reduction.
const PI63: f64 = f64::from_bits(0x3c19_21fb_5444_2d18); // 0x1.921fb54442d18p-62

/// Cosine polynomial c0..c4 in x², for the quadrants where the cosine is positive, then
/// negated for those where it is negative.
const COS_POLY: [[f64; 5]; 2] = [
    [
        1.0,
        f64::from_bits(0xbfdf_ffff_fd0c_621c), // -0x1.ffffffd0c621cp-2
        f64::from_bits(0x3fa5_5553_e106_8f19), //  0x1.55553e1068f19p-5
        f64::from_bits(0xbf56_c087_e89a_359d), // -0x1.6c087e89a359dp-10
        f64::from_bits(0x3ef9_9343_027b_f8c3), //  0x1.99343027bf8c3p-16
    ],
    [
        -1.0,
        f64::from_bits(0x3fdf_ffff_fd0c_621c),
        f64::from_bits(0xbfa5_5553_e106_8f19),
        f64::from_bits(0x3f56_c087_e89a_359d),
        f64::from_bits(0xbef9_9343_027b_f8c3),
    ],
];
/// Sine polynomial s1..s3: `x + x³·(s1 + x²·(s2 + x²·s3))` in glibc's evaluation order.
const SIN_POLY: [f64; 3] = [
    f64::from_bits(0xbfc5_5554_5995_a603), // -0x1.555545995a603p-3
    f64::from_bits(0x3f81_1076_0523_0bc4), //  0x1.1107605230bc4p-7
    f64::from_bits(0xbf29_94eb_3774_cf24), // -0x1.994eb3774cf24p-13
];
/// Sign of the sine (and of `x` fed to the polynomial) in quadrants 0..3.
const QUADRANT_SIGN: [f64; 4] = [1.0, -1.0, -1.0, 1.0];

/// 4/π to 192 bits, one 32-bit word per 8-bit step so that any 96-bit window starting at a
/// multiple of 8 bits is three aligned words (entries i, i+4, i+8).
const INV_PIO4: [u32; 24] = [
    0xa2, 0xa2f9, 0xa2f983, 0xa2f9836e, 0xf9836e4e, 0x836e4e44, 0x6e4e4415, 0x4e441529, 0x441529fc,
    0x1529fc27, 0x29fc2757, 0xfc2757d1, 0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0, 0x34ddc0db,
    0xddc0db62, 0xc0db6295, 0xdb629599, 0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041,
];

/// `2^(i/32)` as double bits, with `i << 47` subtracted so that adding `k << 47` for any `k`
/// with `k % 32 == i` gives `2^(k/32)`.
const EXP2_TABLE: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];
/// 32/ln 2.
const INV_LN2_32: f64 = f64::from_bits(0x4047_1547_652b_82fe); // 0x1.71547652b82fep+5
/// 1.5 · 2^52: adding it rounds a double below 2^51 to an integer held in the low mantissa bits.
const ROUND_SHIFT: f64 = f64::from_bits(0x4338_0000_0000_0000); // 0x1.8p+52
/// `2^(r/32) ≈ 1 + r·E2 + r²·(E1 + r·E0)` for |r| ≤ 1/2.
const EXP_POLY: [f64; 3] = [
    f64::from_bits(0x3ebc_6af8_4b91_2394), // 0x1.c6af84b912394p-20
    f64::from_bits(0x3f2e_bfce_50fa_c4f3), // 0x1.ebfce50fac4f3p-13
    f64::from_bits(0x3f96_2e42_ff0c_52d6), // 0x1.62e42ff0c52d6p-6
];

/// One fused multiply-add, `a·b + c` rounded once.
trait Fused {
    fn mul_add(a: f64, b: f64, c: f64) -> f64;
}

/// The FMA instruction (in code compiled for it) or the C library's `fma`.
struct Hardware;

impl Fused for Hardware {
    #[inline(always)]
    fn mul_add(a: f64, b: f64, c: f64) -> f64 {
        a.mul_add(b, c)
    }
}

/// `a·b + c` rounded once, from plain double operations (Boldo and Melquiond's emulation
/// through rounding to odd): the exact product as a pair, its high part added to `c` exactly,
/// the two low parts added with rounding to odd, then one rounding to nearest. Exact whenever
/// nothing overflows or comes near the subnormals, which holds for every use here (arguments
/// below 2^7 after reduction or before `exp`, polynomial terms above 2^-100).
#[cfg_attr(target_arch = "aarch64", allow(dead_code))] // aarch64 always has the instruction
struct Emulated;

#[cfg_attr(target_arch = "aarch64", allow(dead_code))]
impl Emulated {
    /// `(s, e)` with `s = a + b` rounded and `s + e = a + b` exactly.
    #[inline(always)]
    fn two_sum(a: f64, b: f64) -> (f64, f64) {
        let s = a + b;
        let bb = s - a;
        (s, (a - (s - bb)) + (b - bb))
    }

    /// `(p, e)` with `p = a·b` rounded and `p + e = a·b` exactly (Dekker, Veltkamp's split).
    #[inline(always)]
    fn two_product(a: f64, b: f64) -> (f64, f64) {
        const SPLIT: f64 = 134_217_729.0; // 2^27 + 1
        let split = |x: f64| {
            let t = SPLIT * x;
            let hi = t - (t - x);
            (hi, x - hi)
        };
        let p = a * b;
        let ((ah, al), (bh, bl)) = (split(a), split(b));
        (p, ((ah * bh - p) + ah * bl + al * bh) + al * bl)
    }

    /// `a + b` rounded to odd: exact when representable, otherwise whichever neighbour has an
    /// odd last bit.
    #[inline(always)]
    fn add_round_to_odd(a: f64, b: f64) -> f64 {
        let (s, e) = Self::two_sum(a, b);
        if e == 0.0 || s.to_bits() & 1 == 1 {
            return s;
        }
        // The exact sum lies between s and its neighbour toward e.
        let away_from_zero = (e > 0.0) == (s > 0.0);
        f64::from_bits(if away_from_zero {
            s.to_bits() + 1
        } else {
            s.to_bits() - 1
        })
    }
}

impl Fused for Emulated {
    #[inline(always)]
    fn mul_add(a: f64, b: f64, c: f64) -> f64 {
        let (ph, pl) = Self::two_product(a, b);
        let (th, tl) = Self::two_sum(c, ph);
        th + Self::add_round_to_odd(tl, pl)
    }
}

/// Bits 20..31 of `x` without the sign: the exponent and the top 3 mantissa bits, which is as
/// finely as glibc tells its argument ranges apart.
#[inline(always)]
fn abs_top12(x: f32) -> u32 {
    (x.to_bits() >> 20) & 0x7ff
}

/// `sin(x)`, bit for bit glibc 2.36's x86-64 `sinf` on an FMA CPU.
#[inline]
pub fn sinf(x: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if fma_chosen() {
        // SAFETY: the chosen variant's CPU has FMA.
        return unsafe { fma::sinf(x) };
    }
    sin_or_cos::<Portable>(x, Want::Sin)
}

/// `cos(x)`, bit for bit glibc 2.36's x86-64 `cosf` on an FMA CPU.
#[inline]
pub fn cosf(x: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if fma_chosen() {
        // SAFETY: the chosen variant's CPU has FMA.
        return unsafe { fma::cosf(x) };
    }
    sin_or_cos::<Portable>(x, Want::Cos)
}

/// `e^x`, bit for bit glibc 2.36's x86-64 `expf` on an FMA CPU.
#[inline]
pub fn expf(x: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if fma_chosen() {
        // SAFETY: the chosen variant's CPU has FMA.
        return unsafe { fma::expf(x) };
    }
    exp::<Portable>(x)
}

/// [`expf`] written into its caller, for SIMD kernels compiled with FMA only: each fused step
/// is then the instruction (elsewhere it would be the C library's `fma`, not always right).
#[inline(always)]
pub fn expf_inlined(x: f32) -> f32 {
    exp::<Hardware>(x)
}

/// Whether the FMA-compiled copy runs: the variant `crate::cpu` chose (once, honouring
/// `LLAMAFILE_CPU`) has FMA. Both copies give the same bits; this only picks the faster one.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn fma_chosen() -> bool {
    use crate::cpu::Isa;
    matches!(crate::cpu::isa(), Isa::Avx2 | Isa::Avx512)
}

/// The same code compiled for FMA, so that each `Hardware` step is one instruction.
#[cfg(target_arch = "x86_64")]
mod fma {
    #[target_feature(enable = "fma")]
    pub(super) fn sinf(x: f32) -> f32 {
        super::sin_or_cos::<super::Hardware>(x, super::Want::Sin)
    }

    #[target_feature(enable = "fma")]
    pub(super) fn cosf(x: f32) -> f32 {
        super::sin_or_cos::<super::Hardware>(x, super::Want::Cos)
    }

    #[target_feature(enable = "fma")]
    pub(super) fn expf(x: f32) -> f32 {
        super::exp::<super::Hardware>(x)
    }
}

/// Where the code is not the FMA-compiled copy: the instruction on aarch64, else emulated.
#[cfg(target_arch = "aarch64")]
type Portable = Hardware;
#[cfg(not(target_arch = "aarch64"))]
type Portable = Emulated;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Want {
    Sin,
    Cos,
}

#[inline(always)]
fn sin_or_cos<F: Fused>(y: f32, want: Want) -> f32 {
    let top = abs_top12(y);
    if top < abs_top12(std::f32::consts::FRAC_PI_4) {
        // |y| < 0.75: no reduction.
        let x = y as f64;
        if top < abs_top12(f32::from_bits(0x3980_0000)) {
            // |y| < 2^-12: sin y rounds to y, cos y to 1.
            return match want {
                Want::Sin => y,
                Want::Cos => 1.0,
            };
        }
        let quadrant = match want {
            Want::Sin => 0,
            Want::Cos => 1,
        };
        return poly::<F>(x, x * x, &COS_POLY[0], quadrant);
    }
    let (x, n, sign_index) = if top < abs_top12(120.0) {
        // |y| < 128: one fused multiply-subtract of n·π/2.
        let x = y as f64;
        let n = (((x * HPI_INV) as i32).wrapping_add(0x80_0000)) >> 24;
        (F::mul_add(-(n as f64), HPI, x), n, n)
    } else if top < abs_top12(f32::INFINITY) {
        let (x, n) = reduce_large(y.to_bits());
        (x, n, n + (y.to_bits() >> 31) as i32)
    } else {
        // Infinity or NaN: NaN with glibc's bits (the CPU's default NaN for an infinity, the
        // input quieted for a NaN), made by the same operations.
        #[allow(clippy::eq_op)]
        return (y - y) / (y - y);
    };
    let s = QUADRANT_SIGN[(sign_index & 3) as usize];
    let table = &COS_POLY[((sign_index >> 1) & 1) as usize];
    let quadrant = match want {
        Want::Sin => n,
        Want::Cos => n ^ 1,
    };
    poly::<F>(x * s, x * x, table, quadrant)
}

/// The sine polynomial of `x` for an even quadrant, the cosine polynomial for an odd one;
/// `x2` is `x²` of the unsigned reduced argument.
#[inline(always)]
fn poly<F: Fused>(x: f64, x2: f64, cos: &[f64; 5], quadrant: i32) -> f32 {
    if quadrant & 1 == 0 {
        let x3 = x * x2;
        let s1 = F::mul_add(x2, SIN_POLY[2], SIN_POLY[1]);
        let x7 = x3 * x2;
        let s = F::mul_add(x3, SIN_POLY[0], x);
        F::mul_add(x7, s1, s) as f32
    } else {
        let x4 = x2 * x2;
        let c2 = F::mul_add(x2, cos[4], cos[3]);
        let c1 = F::mul_add(x2, cos[1], cos[0]);
        let x6 = x4 * x2;
        let c = F::mul_add(x4, cos[2], c1);
        F::mul_add(x6, c2, c) as f32
    }
}

/// Reduces a finite `|y| >= 2` (given as its bits; the sign is ignored) modulo π/2 exactly:
/// its 24-bit mantissa times the 96 bits of 4/π that matter for its exponent gives the
/// fraction of a turn in 2.62 fixed point. Returns the remainder in radians (|r| <= π/4) and
/// the quadrant (0..3).
#[inline(always)]
fn reduce_large(bits: u32) -> (f64, i32) {
    let words = &INV_PIO4[((bits >> 26) & 15) as usize..];
    let shift = (bits >> 23) & 7;
    let m = ((bits & 0xff_ffff) | 0x80_0000) << shift;
    let high = m.wrapping_mul(words[0]) as u64;
    let mid = m as u64 * words[4] as u64;
    let low = m as u64 * words[8] as u64;
    let mut frac = ((low >> 32) | (high << 32)).wrapping_add(mid);
    let n = frac.wrapping_add(1 << 61) >> 62;
    frac = frac.wrapping_sub(n << 62);
    ((frac as i64) as f64 * PI63, n as i32)
}

#[inline(always)]
fn exp<F: Fused>(x: f32) -> f32 {
    let top = abs_top12(x);
    if top >= abs_top12(88.0) {
        if x == f32::NEG_INFINITY {
            return 0.0;
        }
        if top >= abs_top12(f32::INFINITY) {
            return x + x;
        }
        if x > f32::from_bits(0x42b1_7217) {
            // Above ln(2^128): overflow.
            return f32::INFINITY;
        }
        if x < f32::from_bits(0xc2cf_f1b4) {
            // Below ln(2^-150): underflow to zero.
            return 0.0;
        }
    }
    let xd = x as f64;
    // k = round(x·32/ln 2) in the low bits of `shifted`, r = x·32/ln 2 - k, both from the
    // product unrounded (fused), as glibc's FMA build computes them.
    let shifted = F::mul_add(xd, INV_LN2_32, ROUND_SHIFT);
    let k = shifted.to_bits();
    let kd = shifted - ROUND_SHIFT;
    let r = F::mul_add(xd, INV_LN2_32, -kd);
    let scale = f64::from_bits(EXP2_TABLE[(k % 32) as usize].wrapping_add(k << 47));
    let z = F::mul_add(EXP_POLY[0], r, EXP_POLY[1]);
    let r2 = r * r;
    let y = F::mul_add(EXP_POLY[2], r, 1.0);
    let y = F::mul_add(z, r2, y);
    (y * scale) as f32
}

#[cfg(test)]
mod tests;
