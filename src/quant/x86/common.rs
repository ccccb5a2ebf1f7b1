//! Small AVX2 building blocks shared by the x86 kernels: loads from typed slices, horizontal
//! sums, nibble and bit unpacking, and the u8×i8 multiply-accumulate (`vpmaddubsw` +
//! `vpmaddwd`).

use std::arch::x86_64::*;

/// 16 bytes from the start of `s`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn ld16(s: &[u8]) -> __m128i {
    assert!(s.len() >= 16);
    // SAFETY: at least 16 readable bytes; unaligned load.
    unsafe { _mm_loadu_si128(s.as_ptr().cast()) }
}

/// 32 bytes from the start of `s`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn ld32(s: &[u8]) -> __m256i {
    assert!(s.len() >= 32);
    // SAFETY: at least 32 readable bytes; unaligned load.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// 32 signed bytes from the start of `s`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn ld32i(s: &[i8]) -> __m256i {
    assert!(s.len() >= 32);
    // SAFETY: at least 32 readable bytes; unaligned load.
    unsafe { _mm256_loadu_si256(s.as_ptr().cast()) }
}

/// Eight f32 from the start of `s`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn ld8f(s: &[f32]) -> __m256 {
    assert!(s.len() >= 8);
    // SAFETY: at least 8 readable floats; unaligned load.
    unsafe { _mm256_loadu_ps(s.as_ptr()) }
}

/// Stores 32 bytes at the start of `d`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn st32i(d: &mut [i8], v: __m256i) {
    assert!(d.len() >= 32);
    // SAFETY: at least 32 writable bytes; unaligned store.
    unsafe { _mm256_storeu_si256(d.as_mut_ptr().cast(), v) }
}

/// f16 (little-endian bytes) to f32 with F16C.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(super) fn f16(b: [u8; 2]) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(
        _mm_cvtsi32_si128(u16::from_le_bytes(b) as i32),
    ))
}

/// The low and high 256-bit halves of a 512-bit register (lanes 0-7 and 8-15).
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn halves_512(x: __m512) -> [__m256; 2] {
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(x)));
    [_mm512_castps512_ps256(x), hi]
}

/// Sum of eight f32 lanes, in ggml's `hsum_float_8` order.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn hsum_f32_8(x: __m256) -> f32 {
    let r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    let r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    let r = _mm_add_ss(r, _mm_movehdup_ps(r));
    _mm_cvtss_f32(r)
}

/// Sum of four i32 lanes.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn hsum_i32_4(a: __m128i) -> i32 {
    let a = _mm_add_epi32(a, _mm_unpackhi_epi64(a, a));
    let a = _mm_add_epi32(a, _mm_shuffle_epi32::<0b10_11_00_01>(a));
    _mm_cvtsi128_si32(a)
}

/// Sum of eight i32 lanes.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn hsum_i32_8(a: __m256i) -> i32 {
    hsum_i32_4(_mm_add_epi32(
        _mm256_castsi256_si128(a),
        _mm256_extracti128_si256::<1>(a),
    ))
}

/// 16 packed nibble pairs to 32 bytes: low nibbles first, then high nibbles (the Q4_0 order).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn nibbles_32(qs: &[u8]) -> __m256i {
    let t = ld16(qs);
    let b = _mm256_set_m128i(_mm_srli_epi16::<4>(t), t);
    _mm256_and_si256(b, _mm256_set1_epi8(0x0f))
}

/// 32 bits to 32 bytes of 0x00 / 0xFF (bit `i` of the little-endian word to byte `i`).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn bits_to_bytes_32(bits: [u8; 4]) -> __m256i {
    let shuf = _mm256_set_epi64x(
        0x0303_0303_0303_0303,
        0x0202_0202_0202_0202,
        0x0101_0101_0101_0101,
        0,
    );
    let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(i32::from_le_bytes(bits)), shuf);
    // Set every bit except the one this byte tests; the byte is all ones iff that bit was set.
    let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
    _mm256_cmpeq_epi8(_mm256_or_si256(bytes, others), _mm256_set1_epi64x(-1))
}

/// Bytes of `v` whose bits under `mask` (one bit, broadcast) are set become `val`, others 0.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn select_bit(v: __m256i, mask: __m256i, val: __m256i) -> __m256i {
    _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, mask), mask), val)
}

/// Unsigned × signed bytes, each group of four adjacent products summed into an i32 lane, with
/// `vpmaddubsw` (i16 pairs, saturating: callers keep |a·b| pairs below 2^15) and `vpmaddwd`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn mul_sum_us8_avx2(ax: __m256i, sy: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1))
}

/// The i16 scales of one half super-block (`lane` 0 or 1 of `sc16`, sixteen i16 scales of
/// groups of 16) copied to both 128-bit lanes, ready for [`scale_pair`].
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn half_scales(sc16: __m256i, lane: usize) -> __m256i {
    if lane == 0 {
        _mm256_permute2x128_si256::<0x00>(sc16, sc16)
    } else {
        _mm256_permute2x128_si256::<0x11>(sc16, sc16)
    }
}

/// From [`half_scales`], scale `2s` broadcast over the low lane and `2s + 1` over the high lane.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn scale_pair(half: __m256i, s: usize) -> __m256i {
    let b = 4 * s as i16;
    let lo = _mm_set1_epi16(b | (b + 1) << 8);
    let hi = _mm_set1_epi16((b + 2) | (b + 3) << 8);
    _mm256_shuffle_epi8(half, _mm256_set_m128i(hi, lo))
}

/// `q` × `y` (u8 × i8, pairs summed to i16 by `vpmaddubsw`) times per-16 scales `sc`
/// (from [`scale_pair`]), pairs summed to eight i32 lanes.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn mul_scaled_16(q: __m256i, y: __m256i, sc: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), sc)
}

/// `acc + Σ a·b` over adjacent i16 pairs, into i32 lanes (`vpdpwssd`), emitted with `asm!`:
/// LLVM's generic tuning splits the intrinsic into `vpmaddwd` + `vpaddd`.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
pub(super) fn dpwssd(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    let mut acc = acc;
    // SAFETY: a register-only instruction; this function's target features guarantee
    // AVX-512 VNNI.
    unsafe {
        std::arch::asm!(
            "vpdpwssd {acc}, {a}, {b}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) a,
            b = in(zmm_reg) b,
            options(pure, nomem, nostack, preserves_flags),
        );
    }
    acc
}

/// The i32 lane sums of `R` vectors (integer adds, so any order gives the same sums); four
/// at a time share one transposing reduction.
#[inline]
#[target_feature(enable = "avx2,avx512f")]
pub(super) fn hsum_i32_16_rows<const R: usize>(v: [__m512i; R]) -> [i32; R] {
    let mut out = [0i32; R];
    if R == 4 {
        let half = |x: __m512i| {
            _mm256_add_epi32(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64::<1>(x))
        };
        let ab = _mm256_hadd_epi32(half(v[0]), half(v[1]));
        let cd = _mm256_hadd_epi32(half(v[2]), half(v[3]));
        let abcd = _mm256_hadd_epi32(ab, cd);
        let s = _mm_add_epi32(
            _mm256_castsi256_si128(abcd),
            _mm256_extracti128_si256::<1>(abcd),
        );
        let mut four = [0i32; 4];
        // SAFETY: `four` is 16 writable bytes; unaligned store.
        unsafe { _mm_storeu_si128(four.as_mut_ptr().cast(), s) };
        out.copy_from_slice(&four[..R]);
    } else {
        for (o, x) in out.iter_mut().zip(v) {
            *o = _mm512_reduce_add_epi32(x);
        }
    }
    out
}

/// 64 signed bytes from the start of `s`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn ld64i(s: &[i8]) -> __m512i {
    assert!(s.len() >= 64);
    // SAFETY: at least 64 readable bytes; unaligned load.
    unsafe { _mm512_loadu_si512(s.as_ptr().cast()) }
}

/// An index vector of i16 lanes: with `per_128`, 128-bit lane `l` (eight i16 lanes) holds
/// `base + l`; without, the low 256 bits hold `base` and the high 256 bits `base + 1`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn lane_index(base: i16, per_128: bool) -> __m512i {
    let v: [i16; 32] = std::array::from_fn(|i| {
        if per_128 {
            base + (i / 8) as i16
        } else {
            base + (i / 16) as i16
        }
    });
    // SAFETY: `[i16; 32]` is 64 readable bytes.
    unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
}
