//! Image encoding time against llama.cpp's (a benchmark, not a timed test: it only prints).
//! Run: `cargo test --release --test vision_bench -- --ignored --nocapture`.
//!
//! For each synthetic projector (tools/synth-model.py: `llava`, `gemma3`, `smolvlm`, the
//! wider `gemma3-base`, `pixtral`, `qwen2vl`, `qwen25vl`, `llama4` and `minicpmv`, f16 and Q8_0)
//! on 2 threads: our time to encode one input of the projector's size (`pixtral`: the square of
//! its input size, scaled into its budget of 1024 patches; the Qwen ones: 560×560, 1600 patches;
//! `llama4`: one 112-pixel tile, the overview alone; `minicpmv`: one 112-pixel input, the
//! overview alone, through the resampler; preprocessing not included), the best of
//! several runs, and
//! `llama-mtmd-cli -t 2`'s "mtmd batch encoding done in N ms" for the same projector and
//! picture (the best over its encodes and runs; whole milliseconds, as it prints them), from
//! `$LLAMA_CPP_BIN` (default ~/.cache/llama-cpp-ref/bin). docs/benchmarks.md has the table.
//! Its whole milliseconds are differences of truncated clock readings, so the best of a few
//! favours llama.cpp on a tower of 1-3 ms; their mean is unbiased, and the last two columns
//! compare means (ours over our encodes, llama.cpp's over at least 15 runs for such towers).
//! `VISION_BENCH_ONLY=gemma3-base` (a comma-separated list) runs only those projectors;
//! `VISION_BENCH_OURS=1` skips llama.cpp (for profiling); `VISION_BENCH_THREADS=1` runs both on
//! one thread (a fairer ratio on a shared machine, where llama.cpp's spinning threads lose the
//! most); `VISION_BENCH_RUNS` sets llama.cpp's runs (default 3, ours take 5 encodes per run).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use common::picture::picture;
use common::projector::synth;
use llamafile::gguf::GgufFile;
use llamafile::vision::{preprocess_tiles, Projector, RgbImage};

fn png_file(img: &RgbImage, path: &Path) {
    std::fs::write(path, common::projector::png(img)).unwrap();
}

/// llama-mtmd-cli's best and mean encode times in ms over `runs` runs (at least 15 when the
/// first took under 20 ms), or `None` without the binary.
fn llama_cpp_ms(
    text: &Path,
    mmproj: &Path,
    png: &Path,
    runs: usize,
    threads: usize,
) -> Option<(u64, f64)> {
    let bin = std::env::var_os("LLAMA_CPP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/llama-cpp-ref/bin")
        });
    let exe = bin.join("llama-mtmd-cli");
    if !exe.exists() {
        return None;
    }
    let mut times: Vec<u64> = Vec::new();
    let mut run = 0;
    while run < runs || (run < 15 && times.first().is_some_and(|&t| t < 20)) {
        run += 1;
        let out = Command::new(&exe)
            .env("LD_LIBRARY_PATH", &bin)
            .arg("-m")
            .arg(text)
            .arg("--mmproj")
            .arg(mmproj)
            .arg("--image")
            .arg(png)
            .args([
                "-p",
                "Describe.",
                "-n",
                "1",
                "--temp",
                "0",
                "-t",
                &threads.to_string(),
                "-fa",
                "off",
            ])
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        for line in log.lines() {
            if let Some(rest) = line.split("mtmd batch encoding done in ").nth(1) {
                if let Some(ms) = rest.split_whitespace().next().and_then(|v| v.parse().ok()) {
                    times.push(ms);
                }
            }
        }
    }
    let best = *times.iter().min()?;
    Some((best, times.iter().sum::<u64>() as f64 / times.len() as f64))
}

#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn encode_time_against_llama_cpp() {
    let threads = std::env::var("VISION_BENCH_THREADS").map_or(2, |v| v.parse().unwrap());
    let runs = std::env::var("VISION_BENCH_RUNS").map_or(3, |v| v.parse().unwrap());
    llamafile::pool::init(threads);
    let dir = std::env::temp_dir().join(format!("llamafile-vision-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let vocab = common::model_path("SmolLM2-135M-Instruct.Q4_1");
    println!(
        "| projector | weights | width × blocks, patches | ours ms | llama.cpp ms | ratio | means ms | ratio of means |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|");
    let only = std::env::var("VISION_BENCH_ONLY").ok();
    let ours_only = std::env::var_os("VISION_BENCH_OURS").is_some();
    for family in [
        "llava",
        "gemma3",
        "smolvlm",
        "gemma3-base",
        "pixtral",
        "qwen2vl",
        "qwen25vl",
        "llama4",
        "minicpmv",
    ] {
        if only
            .as_ref()
            .is_some_and(|o| !o.split(',').any(|f| f == family))
        {
            continue;
        }
        let text = dir.join(format!("text-{family}.gguf"));
        let mut args = vec![family, "f16"];
        let v;
        if let Some(p) = &vocab {
            v = p.to_str().unwrap().to_string();
            args.extend(["--vocab-from", v.as_str()]);
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/synth-model.py");
        let st = Command::new("python3")
            .arg(&script)
            .args(&args[..2])
            .arg(&text)
            .args(&args[2..])
            .status()
            .unwrap();
        assert!(st.success());
        for ty in ["f16", "q8_0"] {
            let mmproj = dir.join(format!("mmproj-{family}-{ty}.gguf"));
            synth(&["--mmproj", family, ty], &mmproj);
            let proj = Projector::load(Arc::new(GgufFile::open(&mmproj).unwrap())).unwrap();
            let hp = &proj.hparams;
            let pic = picture(hp.image_size, hp.image_size);
            let png = dir.join(format!("{family}.png"));
            png_file(&pic, &png);
            let tiles = preprocess_tiles(&pic, proj.ty, hp);
            let input = &tiles.images[0];
            proj.encode(input); // warm-up
            let mut best = f64::MAX;
            let mut sum = 0.0;
            for _ in 0..5 * runs {
                let t = Instant::now();
                std::hint::black_box(proj.encode(input));
                let ms = t.elapsed().as_secs_f64() * 1e3;
                best = best.min(ms);
                sum += ms;
            }
            let mean = sum / (5 * runs) as f64;
            let theirs = if ours_only {
                None
            } else {
                llama_cpp_ms(&text, &mmproj, &png, runs, threads)
            };
            let n_patches = (input.width / hp.patch_size) * (input.height / hp.patch_size);
            let (theirs_s, ratio, means, mean_ratio) = match theirs {
                Some((ms, their_mean)) => (
                    format!("{ms}"),
                    format!("{:.2}", ms as f64 / best),
                    format!("{mean:.1}/{their_mean:.1}"),
                    format!("{:.2}", their_mean / mean),
                ),
                None => ("-".into(), "-".into(), format!("{mean:.1}/-"), "-".into()),
            };
            println!(
                "| {} ({family}) | {ty} | {} × {}, {n_patches} | {best:.1} | {theirs_s} | {ratio} | {means} | {mean_ratio} |",
                proj.ty.name(),
                hp.n_embd,
                hp.n_layer,
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The tower's matrix products alone (`VISION_BENCH_OURS`-style profiling aid): 196 tokens
/// through gemma3-base's shapes (768 → 768, 768 → 3072, 3072 → 768), f16 and Q8_0 weights, on
/// 2 threads (`VISION_BENCH_THREADS`); prints GFLOP/s, the best of many runs.
#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn tower_matmul_speed() {
    use llamafile::ops::{matmul, QMat};
    use llamafile::quant::{quantize_row, GgmlType};
    let threads = std::env::var("VISION_BENCH_THREADS").map_or(2, |v| v.parse().unwrap());
    llamafile::pool::init(threads);
    let n = std::env::var("VISION_BENCH_TOKENS").map_or(196, |v| v.parse().unwrap());
    for ty in [GgmlType::F16, GgmlType::Q8_0] {
        for (rows, cols) in [(768usize, 768usize), (3072, 768), (768, 3072)] {
            let wf: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 0.1)
                .collect();
            let row_bytes = ty.bytes_for(cols as u64).unwrap() as usize;
            let mut data = vec![0u8; rows * row_bytes];
            for (src, dst) in wf.chunks_exact(cols).zip(data.chunks_exact_mut(row_bytes)) {
                quantize_row(ty, src, dst);
            }
            let w = QMat {
                ty,
                rows,
                cols,
                data: &data,
                x8: None,
            };
            let x: Vec<f32> = (0..n * cols)
                .map(|i| (i * 31 % 97) as f32 / 97.0 - 0.5)
                .collect();
            let mut out = vec![0f32; n * rows];
            matmul(&w, &x, n, &mut out);
            let mut best = f64::MAX;
            for _ in 0..50 {
                let t = Instant::now();
                let c = thread_cpu_s();
                matmul(&w, &x, n, &mut out);
                // One thread: the CPU time it took (a shared machine's waits not counted).
                let s = if threads == 1 {
                    thread_cpu_s() - c
                } else {
                    t.elapsed().as_secs_f64()
                };
                best = best.min(s);
            }
            let gflops = 2.0 * (rows * cols * n) as f64 / best / 1e9;
            println!(
                "{ty:?} {rows}x{cols} x {n}: {:.2} ms, {gflops:.1} GFLOP/s",
                best * 1e3
            );
        }
    }
}

/// The calling thread's CPU time in seconds.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The tower's attention alone (profiling aid): 196 positions, 12 heads of 64 (gemma3-base's
/// shape) on 2 threads (`VISION_BENCH_THREADS`); prints the best of many runs.
#[test]
#[ignore = "benchmark: run with --ignored --nocapture"]
fn tower_attention_speed() {
    let threads = std::env::var("VISION_BENCH_THREADS").map_or(2, |v| v.parse().unwrap());
    llamafile::pool::init(threads);
    let (n, n_head, d) = (196, 12, 64);
    let w = n_head * d;
    let gen = |seed: usize| -> Vec<f32> {
        (0..n * w)
            .map(|i| ((i * 7919 + seed) % 1013) as f32 / 1013.0 - 0.5)
            .collect()
    };
    let (q, k, v) = (gen(3), gen(5), gen(7));
    let mut best = f64::MAX;
    for _ in 0..50 {
        let t = Instant::now();
        std::hint::black_box(llamafile::vision::attention::attention(
            &q, &k, &v, n, n_head, 0.125,
        ));
        best = best.min(t.elapsed().as_secs_f64());
    }
    let flops = 4.0 * (n * n * w) as f64;
    println!(
        "attention {n} x {n_head} heads of {d}: {:.3} ms, {:.1} GFLOP/s",
        best * 1e3,
        flops / best / 1e9
    );
}
