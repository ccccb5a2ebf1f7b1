//! Attention over cache rows of any [`KvType`] but f16 keys with f16 values (which keep their
//! own kernels), one query token at a time for every batch size, as ggml's CPU flash attention
//! does for such caches (its `one_chunk` path): each query head converted once to the key
//! format's `vec_dot_type` and dotted with every key row by that format's dot product; the same
//! online softmax; values expanded to f32 and accumulated in f32 with fused multiply-adds (or,
//! for f16 values, accumulated in f16 rounded after every multiply-add, as ggml does).

use super::{softmax_step, KvRows, KvType, Scores};
use half::f16;

/// The heads in `q` (`hd` values each), all reading KV head `kv_head`, over positions
/// `first..=last` of `keys` and `values`, into `out` (the shape of `q`).
#[allow(clippy::too_many_arguments)]
pub(super) fn attend(
    scores: Scores,
    q: &[f32],
    hd: usize,
    keys: &KvRows,
    values: &KvRows,
    kv_head: usize,
    first: usize,
    last: usize,
    out: &mut [f32],
) {
    let n = q.len() / hd;
    let (kt, vt) = (keys.ty, values.ty);
    let qb = kt.query_bytes(hd);
    let mut conv = vec![0u8; n * qb];
    for (qh, c) in q.chunks_exact(hd).zip(conv.chunks_exact_mut(qb)) {
        kt.prepare_query(qh, c);
    }
    let (k_head, v_head) = (kt.row_bytes(hd), vt.row_bytes(hd));
    let mut dots = vec![0f32; n];
    let mut weight = vec![0f32; n];
    let mut state = vec![(f32::NEG_INFINITY, 0f32); n];
    let mut acc = vec![0f32; n * hd];
    let mut acc16 = vec![f16::ZERO; if vt == KvType::F16 { n * hd } else { 0 }];
    let mut v = vec![0f32; hd];
    let fma = Fma::pick();
    for p in first..=last {
        let k = &keys.row(p)[kv_head * k_head..][..k_head];
        kt.dots(hd, k, &conv, &mut dots);
        for (h, ((d, (max, sum)), w)) in dots
            .iter()
            .zip(state.iter_mut())
            .zip(weight.iter_mut())
            .enumerate()
        {
            let (ms, vs) = softmax_step(scores.apply(*d), max, sum);
            if ms != 1.0 {
                if vt == KvType::F16 {
                    acc16[h * hd..][..hd]
                        .iter_mut()
                        .for_each(|a| *a = f16::from_f32(a.to_f32() * ms));
                } else {
                    acc[h * hd..][..hd].iter_mut().for_each(|a| *a *= ms);
                }
            }
            *w = vs;
        }
        let row = &values.row(p)[kv_head * v_head..][..v_head];
        vt.decode(row, &mut v);
        if vt == KvType::F16 {
            for (a, w) in acc16.chunks_exact_mut(hd).zip(&weight) {
                fma.mad_f16(a, &v, *w);
            }
        } else {
            for (a, w) in acc.chunks_exact_mut(hd).zip(&weight) {
                fma.mad(a, &v, *w);
            }
        }
    }
    if vt == KvType::F16 {
        for (a, b) in acc.iter_mut().zip(&acc16) {
            *a = b.to_f32();
        }
    }
    for ((o, a), (_, sum)) in out.chunks_exact_mut(hd).zip(acc.chunks(hd)).zip(&state) {
        let inv = if *sum == 0.0 { 0.0 } else { 1.0 / sum };
        for (o, a) in o.iter_mut().zip(a) {
            *o = a * inv;
        }
    }
}

/// `acc += x · w` element by element as fused multiply-adds, compiled for the CPU's widest
/// vectors (the results are the same on every path: one rounding per element).
#[derive(Clone, Copy)]
enum Fma {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx512,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Fma {
    fn pick() -> Fma {
        #[cfg(target_arch = "x86_64")]
        match crate::cpu::isa() {
            crate::cpu::Isa::Avx512 => return Fma::Avx512,
            crate::cpu::Isa::Avx2 => return Fma::Avx2,
            _ => {}
        }
        Fma::Portable
    }

    fn mad(self, acc: &mut [f32], x: &[f32], w: f32) {
        match self {
            Fma::Portable => mad(acc, x, w),
            // SAFETY: picked only when the CPU has AVX-512F and FMA.
            #[cfg(target_arch = "x86_64")]
            Fma::Avx512 => unsafe { mad_avx512(acc, x, w) },
            // SAFETY: picked only when the CPU has AVX2 and FMA.
            #[cfg(target_arch = "x86_64")]
            Fma::Avx2 => unsafe { mad_avx2(acc, x, w) },
        }
    }

    fn mad_f16(self, acc: &mut [f16], x: &[f32], w: f32) {
        match self {
            Fma::Portable => mad_f16(acc, x, w),
            // SAFETY: picked only when the CPU has AVX-512F, F16C and FMA.
            #[cfg(target_arch = "x86_64")]
            Fma::Avx512 => unsafe { mad_f16_avx512(acc, x, w) },
            // SAFETY: picked only when the CPU has AVX2, F16C and FMA.
            #[cfg(target_arch = "x86_64")]
            Fma::Avx2 => unsafe { mad_f16_avx2(acc, x, w) },
        }
    }
}

#[inline(always)]
fn mad(acc: &mut [f32], x: &[f32], w: f32) {
    for (a, x) in acc.iter_mut().zip(x) {
        *a = x.mul_add(w, *a);
    }
}

#[inline(always)]
fn mad_f16(acc: &mut [f16], x: &[f32], w: f32) {
    for (a, x) in acc.iter_mut().zip(x) {
        *a = f16::from_f32(x.mul_add(w, a.to_f32()));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn mad_avx512(acc: &mut [f32], x: &[f32], w: f32) {
    mad(acc, x, w)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn mad_avx2(acc: &mut [f32], x: &[f32], w: f32) {
    mad(acc, x, w)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,f16c,fma")]
unsafe fn mad_f16_avx512(acc: &mut [f16], x: &[f32], w: f32) {
    mad_f16(acc, x, w)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c,fma")]
unsafe fn mad_f16_avx2(acc: &mut [f16], x: &[f32], w: f32) {
    mad_f16(acc, x, w)
}
