//! The image encoder on a real GPU (`--mmproj-offload`): for every synthetic projector
//! (tools/synth-model.py, f16 and Q8_0), the test picture encoded on the CPU and with the matrix
//! products and attention on the GPU ([`CudaEncoder`]) agree within the f16 rounding the GPU's
//! attention keeps its keys and values in; then the time of the wider `gemma3-base` tower both
//! ways; and float matrices whose width is not whole units of 32 (SigLIP so400m's 4304) give the
//! CPU's products. Needs an NVIDIA GPU and python3 with the gguf package, so it is ignored by default:
//!
//! `cargo test --release --test vision_gpu -- --ignored --nocapture`
//!
//! (`VISION_GPU_THREADS` sets the CPU's threads, default all cores.) docs/gpu.md has the
//! figures of the runs made so far.

mod common;

use common::picture::picture;
use common::projector::synth;
use llamafile::gguf::GgufFile;
use llamafile::gpu::encoder::CudaEncoder;
use llamafile::gpu::{GpuMode, GpuOptions};
use llamafile::vision::{preprocess_tiles, PlanarImage, Projector};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// Largest relative RMS difference allowed between the CPU's and the GPU's embeddings, by
/// weight type. F16: the GPU rounds attention's keys and values to f16 (about 5e-4 relative
/// each, as llama.cpp's CUDA encoder does) and sums its products in another order. Q8_0: the
/// CPU also rounds each row of activations to 8-bit blocks before its dot products (ggml's
/// vec_dot_q8_0_q8_0, as llama.cpp's CPU encoder does), which the GPU's kernels do not (they
/// multiply dequantized weights by f32 activations): about 1e-2 relative on these towers.
fn max_rel_rms(ty: &str) -> f64 {
    match ty {
        "f16" => 2e-3,
        _ => 3e-2,
    }
}

/// sqrt(mean((a - b)²)) / sqrt(mean(a²)), and max |a - b|.
fn difference(a: &[f32], b: &[f32]) -> (f64, f64) {
    assert_eq!(a.len(), b.len());
    let (mut d2, mut a2, mut max) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        let d = (*x as f64 - *y as f64).abs();
        d2 += d * d;
        a2 += (*x as f64) * (*x as f64);
        max = max.max(d);
    }
    ((d2 / a2.max(f64::MIN_POSITIVE)).sqrt(), max)
}

fn best_ms(proj: &Projector, input: &PlanarImage, runs: usize) -> f64 {
    proj.encode(input); // warm-up (and the GPU's weight upload)
    let mut best = f64::MAX;
    for _ in 0..runs {
        let t = Instant::now();
        std::hint::black_box(proj.encode(input));
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
    }
    best
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored"]
fn the_encoder_on_the_gpu_gives_the_cpus_embeddings() {
    let threads = std::env::var("VISION_GPU_THREADS").map_or_else(
        |_| llamafile::cores::physical_cores(),
        |v| v.parse().unwrap(),
    );
    llamafile::pool::init(threads);
    let opened = llamafile::gpu::start(&GpuOptions {
        mode: GpuMode::Nvidia,
        main_gpu: 0,
        recompile: false,
    })
    .unwrap_or_else(|e| panic!("no GPU: {e}"));
    let name = opened.device.info().name.clone();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vision-gpu");
    std::fs::create_dir_all(&dir).unwrap();
    println!("GPU: {name}; CPU threads: {threads}");
    println!("| projector | weights | tokens | rel. RMS diff | max abs diff | CPU ms | GPU ms |");
    println!("|---|---|---|---|---|---|---|");
    let mut worst = 0f64;
    for family in [
        "llava",
        "gemma3",
        "smolvlm",
        "pixtral",
        "mistral3",
        "qwen2vl",
        "qwen25vl",
        "llama4",
        "minicpmv",
        "gemma3-base",
    ] {
        for ty in ["f16", "q8_0"] {
            let path = dir.join(format!("mmproj-{family}-{ty}.gguf"));
            synth(&["--mmproj", family, ty], &path);
            let mut proj = Projector::load(Arc::new(GgufFile::open(&path).unwrap())).unwrap();
            let hp = &proj.hparams;
            let pic = picture(hp.image_size, hp.image_size);
            let tiles = preprocess_tiles(&pic, proj.ty, hp);
            let input = &tiles.images[0];
            let runs = if family == "gemma3-base" { 10 } else { 3 };
            let cpu_ms = best_ms(&proj, input, runs);
            let cpu = proj.encode(input);
            // One encoder per projector, as the program makes it: its caches know the
            // projector's weights by their addresses.
            proj.set_device(Some(Arc::new(CudaEncoder::new(&opened.device))));
            let gpu_ms = best_ms(&proj, input, runs);
            let on_gpu = proj.encode(input);
            let (rel, max) = difference(&cpu, &on_gpu);
            worst = worst.max(rel);
            println!(
                "| {} ({family}) | {ty} | {} | {rel:.2e} | {max:.2e} | {cpu_ms:.1} | {gpu_ms:.1} |",
                proj.ty.name(),
                cpu.len() / proj.n_embd_out(),
            );
            assert!(
                cpu.iter().chain(&on_gpu).all(|v| v.is_finite()),
                "{family} {ty}: a non-finite embedding"
            );
            assert!(
                rel <= max_rel_rms(ty),
                "{family} {ty}: the GPU's embeddings differ from the CPU's by {rel:.2e} (RMS, relative)"
            );
        }
    }
    println!("worst relative RMS difference: {worst:.2e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
#[ignore = "needs an NVIDIA GPU: run with --ignored"]
fn float_matrices_of_any_width_multiply_on_the_gpu() {
    use llamafile::backend::encoder::EncoderDevice;
    use llamafile::ops::{matmul, QMat};
    use llamafile::quant::GgmlType;
    llamafile::pool::init(llamafile::cores::physical_cores());
    let opened = llamafile::gpu::start(&GpuOptions {
        mode: GpuMode::Nvidia,
        main_gpu: 0,
        recompile: false,
    })
    .unwrap_or_else(|e| panic!("no GPU: {e}"));
    // SigLIP so400m's feed-forward down projection: 4304 columns, 134.5 units of 32.
    let (rows, cols) = (96usize, 4304usize);
    let values: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7919 % 1000) as f32 / 1000.0 - 0.5) * 0.1)
        .collect();
    for ty in [GgmlType::F32, GgmlType::F16] {
        let data: Vec<u8> = match ty {
            GgmlType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            _ => values
                .iter()
                .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                .collect(),
        };
        let m = QMat {
            ty,
            rows,
            cols,
            data: &data,
            x8: None,
        };
        for n in [1usize, 5, 70] {
            let x: Vec<f32> = (0..n * cols)
                .map(|i| (i * 104729 % 997) as f32 / 997.0 - 0.5)
                .collect();
            let mut cpu = vec![0f32; n * rows];
            matmul(&m, &x, n, &mut cpu);
            let mut gpu = vec![0f32; n * rows];
            let enc = CudaEncoder::new(&opened.device);
            assert!(enc.matmul(&m, &x, n, &mut gpu), "{ty:?}: declined");
            let (rel, max) = difference(&cpu, &gpu);
            println!("{ty:?} {rows}x{cols}, {n} rows: rel. RMS {rel:.2e}, max {max:.2e}");
            // The CPU rounds the activations to f16 for F16 weights (ggml's vec_dot_f16).
            let bound = if ty == GgmlType::F32 { 1e-5 } else { 2e-3 };
            assert!(rel <= bound, "{ty:?} {n} rows: {rel:.2e}");
        }
    }
}
