use super::tiles32::{Q4_0, Q4_1, Q8_0};
use super::tiles32_avx2::{gemm_shape, Avx2Block};
use crate::quant::{self, pack_acts, pack_single, GgmlType};
use std::time::Instant;

fn weights(ty: GgmlType, rows: usize, n: usize) -> Vec<u8> {
    let x: Vec<f32> = (0..rows * n)
        .map(|i| ((i * 7919 % 1013) as f32 / 1013.0) - 0.5)
        .collect();
    let rb = ty.bytes_for(n as u64).unwrap() as usize;
    let mut w = vec![0u8; rows * rb];
    for r in 0..rows {
        quant::quantize_row(ty, &x[r * n..][..n], &mut w[r * rb..][..rb]);
    }
    w
}

fn run<B: Avx2Block, const NR: usize, const NT: usize>(ty: GgmlType, name: &str) {
    let (rows, n, tokens) = (1536, 576, 64);
    let w = weights(ty, rows, n);
    let at = ty.vec_dot_type();
    let a = weights(at, tokens, n);
    let p = pack_acts(ty, n, &a, tokens);
    let mut out = vec![0f32; rows * tokens];
    let mut best = f64::MAX;
    for _ in 0..20 {
        let t = Instant::now();
        unsafe { gemm_shape::<B, NR, NT>(&w, rows, &p, 0..p.n_pairs(), &mut out, rows, 1) };
        best = best.min(t.elapsed().as_secs_f64());
    }
    let gops = (rows * n * tokens) as f64 * 2.0 / best / 1e9;
    eprintln!(
        "{name} {ty} {NR}x{NT}: {:.3} ms  {gops:.1} GOPS",
        best * 1e3
    );
}

fn legacy(ty: GgmlType) {
    let (rows, n, tokens) = (1536, 576, 64);
    let w = weights(ty, rows, n);
    let at = ty.vec_dot_type();
    let a = weights(at, tokens, n);
    let arow = a.len() / tokens;
    let wrow = w.len() / rows;
    let mut col = vec![0f32; tokens];
    let mut best = f64::MAX;
    for _ in 0..10 {
        let t = Instant::now();
        for r in 0..rows {
            quant::vec_dot_rows(ty, n, &w[r * wrow..][..wrow], &a, arow, &mut col);
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    let gops = (rows * n * tokens) as f64 * 2.0 / best / 1e9;
    eprintln!("legacy {ty}: {:.3} ms  {gops:.1} GOPS", best * 1e3);
    // matvec vs many
    let big = 8192;
    let w = weights(ty, big, n);
    let mut out = vec![0f32; big];
    let p = pack_single(ty, n, &a[..arow]);
    let mut b1 = f64::MAX;
    let mut b2 = f64::MAX;
    for _ in 0..20 {
        let t = Instant::now();
        quant::matvec(&w, &p, &mut out);
        b1 = b1.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        quant::vec_dot_many(ty, n, &w, &a[..arow], &mut out);
        b2 = b2.min(t.elapsed().as_secs_f64());
    }
    eprintln!("matvec {ty}: {:.3} ms vs many {:.3} ms", b1 * 1e3, b2 * 1e3);
}

#[test]
#[ignore]
fn shapes() {
    for (ty, _) in [
        (GgmlType::Q4_1, 0),
        (GgmlType::Q4_0, 0),
        (GgmlType::Q8_0, 0),
    ] {
        legacy(ty);
    }
    run::<Q4_1, 1, 8>(GgmlType::Q4_1, "");
    run::<Q4_1, 2, 3>(GgmlType::Q4_1, "");
    run::<Q4_0, 2, 4>(GgmlType::Q4_0, "");
    run::<Q4_0, 4, 3>(GgmlType::Q4_0, "");
    run::<Q8_0, 3, 3>(GgmlType::Q8_0, "");
    run::<Q8_0, 1, 8>(GgmlType::Q8_0, "");
}
