//! Matrix-vector kernel speed on real weights (a benchmark, not a timed test: it only prints).
//! Run: `cargo test --release --test matvec_bench -- --ignored --nocapture` (`LLAMAFILE_CPU`
//! picks the kernels; `MATVEC_BENCH_MODEL` names a GGUF, default Qwen2.5-Coder-1.5B).
//!
//! For each weight type the model has (and each type the kernels in use read regrouped by
//! `quant::x8`, as ` x8`), one thread runs the one-token kernel over a tensor of
//! that type twice: hot (a slice that fits in L2, repeated) and streaming (every matrix of that
//! type in turn, as a generated token reads them), and prints the GB/s of weights read per
//! second of the thread's own CPU time (time the thread spent descheduled by other work on a
//! shared machine is not counted; contention for caches and memory still is).

mod common;

use llamafile::gguf::GgufFile;
use llamafile::quant::{self, GgmlType};

/// Seconds of CPU time this thread has used.
fn thread_cpu_seconds() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one live timespec.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) },
        0
    );
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// GB/s of `reps` one-token products with `w` (`cols` columns of `ty`), regrouped by
/// `quant::x8` (`x8`) or as they are.
fn run_with(ty: GgmlType, cols: usize, w: &[u8], reps: usize, x8: bool) -> f64 {
    let act_ty = ty.vec_dot_type();
    let x: Vec<f32> = (0..cols)
        .map(|i| ((i * 7919) % 113) as f32 / 57.0 - 1.0)
        .collect();
    let mut qx = vec![0u8; act_ty.block_bytes() * cols / act_ty.block_elems()];
    quant::quantize_row(act_ty, &x, &mut qx);
    let packed = quant::pack_single(ty, cols, &qx);
    let rows = w.len() / (ty.block_bytes() * cols / ty.block_elems());
    let mut out = vec![0f32; rows];
    let f = if x8 { quant::x8::matvec } else { quant::matvec };
    f(w, &packed, &mut out);
    let t = thread_cpu_seconds();
    for _ in 0..reps {
        f(w, &packed, &mut out);
    }
    (w.len() * reps) as f64 / (thread_cpu_seconds() - t) / 1e9
}

#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn matvec_gb_per_second() {
    let name = std::env::var("MATVEC_BENCH_MODEL")
        .unwrap_or_else(|_| "qwen2.5-coder-1.5b-instruct".to_string());
    let Some(p) = common::model_path(&name) else {
        return;
    };
    let f = GgufFile::open(&p).unwrap();
    println!("kernels: {}", quant::kernel_variant());
    let mut types: Vec<GgmlType> = f.tensors().iter().map(|t| t.ty).collect();
    types.sort_by_key(|t| format!("{t}"));
    types.dedup();
    let mut variants: Vec<(GgmlType, bool)> = types.iter().map(|&t| (t, false)).collect();
    for &t in &types {
        if quant::x8::can_regroup(t, 8) {
            variants.push((t, true));
        }
    }
    for (ty, x8) in variants {
        if !quant::has_matvec(ty) {
            continue;
        }
        let mats: Vec<_> = f
            .tensors()
            .iter()
            .filter(|t| t.ty == ty && t.dims.len() == 2 && t.name != "token_embd.weight")
            .collect();
        let Some(first) = mats.first() else { continue };
        let cols = first.dims[0] as usize;
        let row_bytes = ty.block_bytes() * cols / ty.block_elems();
        let hot_rows = (512 * 1024 / row_bytes / 8).max(1) * 8;
        // Both variants read copies in anonymous memory.
        let data = |m: &llamafile::gguf::TensorInfo, rows: usize| -> Vec<u8> {
            let d = &f.tensor_data(m)[..rows * ty.block_bytes() * m.dims[0] as usize / 256];
            if x8 {
                quant::x8::regroup(ty, d, rows, m.dims[0] as usize / 256)
            } else {
                d.to_vec()
            }
        };
        let hot = data(first, hot_rows);
        let hot_gbs = run_with(ty, cols, &hot, 400, x8);
        let mats: Vec<_> = mats
            .iter()
            .map(|m| (m.dims[0] as usize, data(m, m.dims[1] as usize)))
            .collect();
        // Every page touched before timing.
        for (c, w) in &mats {
            run_with(ty, *c, w, 0, x8);
        }
        let t = thread_cpu_seconds();
        let mut bytes = 0usize;
        for _ in 0..2 {
            for (c, w) in &mats {
                run_with(ty, *c, w, 1, x8);
                bytes += 2 * w.len();
            }
        }
        let stream_gbs = bytes as f64 / (thread_cpu_seconds() - t) / 1e9;
        println!(
            "{ty}{}: hot {hot_gbs:.1} GB/s ({} KiB), streaming {stream_gbs:.1} GB/s over {} matrices ({} MB)",
            if x8 { " x8" } else { "" },
            hot.len() / 1024,
            mats.len(),
            bytes / 4_000_000
        );
    }
}
