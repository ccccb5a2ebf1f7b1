//! `--bench`: prompt-processing and generation speed measured the way llama.cpp's `llama-bench`
//! does, printed as its markdown table or its JSON rows so that scripts written for it work.
//!
//! - `ppN`: one batch of `N` random tokens from an empty cache (logits for the last one only);
//! - `tgN`: `N` single-token forward passes from an empty cache;
//! - `ppP+tgG` (`-pg P,G`): a `P`-token prompt, then `G` single-token passes after it, timed
//!   together.
//!
//! With `-d N` every test runs on top of `N` tokens already in the cache (filled untimed, as
//! llama-bench's `-d` does) and is named `pp512 @ d1024`.
//!
//! Each test runs once unmeasured (warm-up), then `-r` times; `avg_ts`/`stddev_ts` are the mean
//! and sample standard deviation of the per-run tokens/second. This module owns measuring and
//! reporting only; the forward pass is `engine::PlacedModel`'s.
//!
//! After the table, each generation test's memory traffic goes to stderr (weight bytes per
//! token × tokens/s, [`membw`]); with `LLAMAFILE_BENCH_MEMBW=1` also the machine's read bound,
//! measured on the same threads after the tests.

pub mod membw;

use crate::cli::Cli;
use crate::engine::loaded::Loaded;
use crate::engine::PlacedModel;
use crate::gguf::{file_type_name, GgufFile};
use crate::model::Batch;
use anyhow::{bail, Result};
use std::time::Instant;

/// Output formats (`-o`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Json,
}

/// What to measure, validated from the command line.
#[derive(Clone, Debug)]
pub struct Options {
    /// Prompt sizes (`-p`, comma-separated; 0 skips the prompt test).
    pub n_prompt: Vec<usize>,
    /// Generation length (`-n`; 0 skips the generation test).
    pub n_gen: usize,
    /// Prompt-then-generation tests (`-pg P,G`).
    pub prompt_gen: Vec<(usize, usize)>,
    /// Cache depths each test runs at (`-d`).
    pub depths: Vec<usize>,
    /// Tokens per forward pass when filling the cache to a depth (`-ub`).
    pub ubatch: usize,
    /// Measured runs per test (`-r`).
    pub repetitions: usize,
    pub format: Format,
    pub threads: usize,
}

impl Options {
    /// Reads `-p`, `-n`, `-r` and `-o` with bench meanings (`-p`/`-n` are sizes here).
    pub fn from_cli(cli: &Cli, threads: usize) -> Result<Options> {
        let n_prompt = match cli.prompt.as_deref() {
            None => vec![512],
            Some(s) => s
                .split(',')
                .map(|v| v.trim().parse::<usize>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| {
                    anyhow::anyhow!(
                        "--bench: -p takes prompt sizes (e.g. 512 or 128,512), got '{s}'"
                    )
                })?,
        };
        let n_gen = match cli.n_predict {
            -1 => 128,
            n if n < 0 => bail!("--bench: -n takes a generation length >= 0, got {n}"),
            n => n as usize,
        };
        let format = match cli.bench_output.as_deref().unwrap_or("md") {
            "md" => Format::Markdown,
            "json" => Format::Json,
            other => bail!("--bench: -o takes md or json, got '{other}'"),
        };
        if cli.repetitions == 0 {
            bail!("--bench: -r takes a number of runs >= 1");
        }
        let prompt_gen = cli
            .bench_pg
            .iter()
            .map(|pg| {
                let parsed = pg
                    .split_once(',')
                    .and_then(|(p, g)| Some((p.trim().parse().ok()?, g.trim().parse().ok()?)));
                match parsed {
                    Some((p, g)) if p > 0 && g > 0 => Ok((p, g)),
                    _ => Err(anyhow::anyhow!(
                        "--bench: -pg takes a prompt size and a generation length above 0, as 512,128; got '{pg}'"
                    )),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let depths = match cli.bench_depth.as_deref() {
            None => vec![0],
            Some(s) => s
                .split(',')
                .map(|v| v.trim().parse::<usize>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| {
                    anyhow::anyhow!("--bench: -d takes cache depths (e.g. 0 or 0,1024), got '{s}'")
                })?,
        };
        Ok(Options {
            depths,
            ubatch: cli.forward_batch(),
            n_prompt,
            n_gen,
            prompt_gen,
            repetitions: cli.repetitions,
            format,
            threads,
        })
    }
}

/// One measured test.
#[derive(Clone, Debug)]
pub struct TestResult {
    /// Tokens in the cache before the test (`-d`).
    pub n_depth: usize,
    pub n_prompt: usize,
    pub n_gen: usize,
    /// Seconds of each measured run.
    pub samples: Vec<f64>,
}

impl TestResult {
    /// llama-bench's name for the test: `pp512`, `tg128`, `pp512+tg128`.
    pub fn name(&self) -> String {
        let test = match (self.n_prompt, self.n_gen) {
            (p, 0) => format!("pp{p}"),
            (0, g) => format!("tg{g}"),
            (p, g) => format!("pp{p}+tg{g}"),
        };
        match self.n_depth {
            0 => test,
            d => format!("{test} @ d{d}"),
        }
    }

    fn n_tokens(&self) -> usize {
        self.n_prompt + self.n_gen
    }

    /// Tokens per second of each run.
    pub fn samples_ts(&self) -> Vec<f64> {
        self.samples
            .iter()
            .map(|s| self.n_tokens() as f64 / s)
            .collect()
    }
}

/// Mean and sample standard deviation (0 for fewer than two values).
pub fn mean_stddev(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (v.len() - 1) as f64;
    (mean, var.sqrt())
}

/// Deterministic pseudo-random token ids below `n_vocab` (llama-bench also uses random tokens).
fn random_tokens(n: usize, n_vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % n_vocab as u64) as u32
        })
        .collect()
}

/// Seconds for `prompt` as one batch (if any) and then one pass per token of `gen` after it,
/// on top of `depth` tokens put in the cache first (untimed, in `ubatch`-sized passes).
fn time_prompt_then_generation(
    model: &PlacedModel,
    depth: &[u32],
    ubatch: usize,
    prompt: &[u32],
    gen: &[u32],
) -> f64 {
    let d = depth.len();
    let mut cache = model.new_cache((d + prompt.len() + gen.len()).max(1));
    for (i, chunk) in depth.chunks(ubatch.max(1)).enumerate() {
        let batch = Batch::sequence(chunk, i * ubatch, false);
        std::hint::black_box(model.forward(&batch, std::slice::from_mut(&mut cache)));
    }
    let t = Instant::now();
    if !prompt.is_empty() {
        let batch = Batch::sequence(prompt, d, false);
        std::hint::black_box(model.forward(&batch, std::slice::from_mut(&mut cache)));
    }
    for (i, &tok) in gen.iter().enumerate() {
        let batch = Batch::sequence(&[tok], d + prompt.len() + i, false);
        std::hint::black_box(model.forward(&batch, std::slice::from_mut(&mut cache)));
    }
    t.elapsed().as_secs_f64()
}

/// Runs every requested test at every depth (warm-up, then `repetitions` measured runs).
pub fn measure(model: &PlacedModel, opts: &Options) -> Vec<TestResult> {
    let n_vocab = model.config.n_vocab;
    let mut tests: Vec<(usize, usize)> = opts
        .n_prompt
        .iter()
        .filter(|&&n| n > 0)
        .map(|&n| (n, 0))
        .collect();
    if opts.n_gen > 0 {
        tests.push((0, opts.n_gen));
    }
    tests.extend(opts.prompt_gen.iter().copied());
    let mut results = Vec::new();
    for &(p, g) in &tests {
        for &d in &opts.depths {
            let depth = random_tokens(d, n_vocab, 5);
            let (prompt, gen) = (random_tokens(p, n_vocab, 3), random_tokens(g, n_vocab, 4));
            let run =
                |gen: &[u32]| time_prompt_then_generation(model, &depth, opts.ubatch, &prompt, gen);
            run(&gen[..g.min(1)]);
            let samples = (0..opts.repetitions).map(|_| run(&gen)).collect();
            results.push(TestResult {
                n_depth: d,
                n_prompt: p,
                n_gen: g,
                samples,
            });
        }
    }
    results
}

/// What the report says about the model.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub filename: String,
    /// `arch size ftype`, as llama-bench's `model` column.
    pub desc: String,
    /// Bytes of all tensors.
    pub size: u64,
    pub n_params: u64,
}

impl ModelInfo {
    pub fn of(file: &GgufFile, filename: &str) -> ModelInfo {
        let size = file.tensors().iter().map(|t| t.n_bytes()).sum();
        let n_params: u64 = file.tensors().iter().map(|t| t.n_elements()).sum();
        let arch = file.architecture().unwrap_or("?");
        let ftype = file
            .get_u32("general.file_type")
            .map_or("?", file_type_name);
        ModelInfo {
            filename: filename.to_string(),
            desc: format!("{arch} {} {ftype}", params_label(n_params)),
            size,
            n_params,
        }
    }
}

fn params_label(n: u64) -> String {
    if n >= 1_000_000_000 {
        format!("{:.1}B", n as f64 / 1e9)
    } else {
        format!("{}M", (n as f64 / 1e6).round())
    }
}

/// llama-bench's markdown table.
pub fn markdown(info: &ModelInfo, opts: &Options, results: &[TestResult]) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} | {:>15} | {:>20} |\n",
        "model", "size", "params", "backend", "threads", "test", "t/s"
    ));
    s.push_str(&format!(
        "| {} | {}: | {}: | {} | {}: | {}: | {}: |\n",
        "-".repeat(30),
        "-".repeat(9),
        "-".repeat(9),
        "-".repeat(10),
        "-".repeat(6),
        "-".repeat(14),
        "-".repeat(19)
    ));
    let size = format!("{:.2} MiB", info.size as f64 / (1024.0 * 1024.0));
    let params = format!("{:.2} M", info.n_params as f64 / 1e6);
    let backend = format!("CPU {}", crate::quant::kernel_variant());
    for r in results {
        let (avg, sd) = mean_stddev(&r.samples_ts());
        s.push_str(&format!(
            "| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} | {:>15} | {:>20} |\n",
            info.desc,
            size,
            params,
            backend,
            opts.threads,
            r.name(),
            format!("{avg:.2} ± {sd:.2}")
        ));
    }
    s
}

/// llama-bench's `-o json` rows (the fields scripts read, plus our kernel variant).
pub fn json(info: &ModelInfo, opts: &Options, results: &[TestResult]) -> serde_json::Value {
    let rows = results
        .iter()
        .map(|r| {
            let ts = r.samples_ts();
            let ns: Vec<u64> = r.samples.iter().map(|s| (s * 1e9) as u64).collect();
            let ns_f: Vec<f64> = ns.iter().map(|&v| v as f64).collect();
            let (avg_ts, stddev_ts) = mean_stddev(&ts);
            let (avg_ns, stddev_ns) = mean_stddev(&ns_f);
            serde_json::json!({
                "build_commit": env!("CARGO_PKG_VERSION"),
                "backends": "CPU",
                "cpu_variant": crate::quant::kernel_variant(),
                "model_filename": info.filename,
                "model_type": info.desc,
                "model_size": info.size,
                "model_n_params": info.n_params,
                "n_threads": opts.threads,
                "n_prompt": r.n_prompt,
                "n_depth": r.n_depth,
                "n_gen": r.n_gen,
                "test": r.name(),
                "avg_ns": avg_ns as u64,
                "stddev_ns": stddev_ns as u64,
                "avg_ts": avg_ts,
                "stddev_ts": stddev_ts,
                "samples_ns": ns,
                "samples_ts": ts,
            })
        })
        .collect();
    serde_json::Value::Array(rows)
}

/// The `--bench` mode: measure `loaded` and print the report to stdout.
pub fn run(cli: &Cli, loaded: &Loaded, model_name: &str, threads: usize) -> Result<()> {
    let opts = Options::from_cli(cli, threads)?;
    let info = ModelInfo::of(&loaded.model.file, model_name);
    let results = measure(&loaded.model, &opts);
    match opts.format {
        Format::Markdown => print!("{}", markdown(&info, &opts, &results)),
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&json(&info, &opts, &results))?
        ),
    }
    report_traffic(loaded, &results);
    Ok(())
}

/// The generation tests' weight traffic on stderr, and the read bound when asked for.
fn report_traffic(loaded: &Loaded, results: &[TestResult]) {
    let tg: Vec<&TestResult> = results
        .iter()
        .filter(|r| r.n_prompt == 0 && r.n_gen > 0)
        .collect();
    if tg.is_empty() {
        return;
    }
    let bytes = membw::weight_bytes_per_token(&loaded.model.file, &loaded.model.config) as f64;
    let bound = std::env::var("LLAMAFILE_BENCH_MEMBW")
        .is_ok_and(|v| v == "1")
        .then(|| membw::read_bandwidth(5));
    for r in tg {
        let (ts, _) = mean_stddev(&r.samples_ts());
        let gbs = bytes * ts / 1e9;
        let of_bound = match bound {
            Some(b) if b > 0.0 => format!(
                "; read bound {:.1} GB/s on {} threads ({:.0}%)",
                b / 1e9,
                crate::pool::global().threads(),
                100.0 * gbs * 1e9 / b
            ),
            _ => String::new(),
        };
        eprintln!(
            "bench: {}: {:.3} GB of weights per token x {ts:.2} t/s = {gbs:.1} GB/s{of_bound}",
            r.name(),
            bytes / 1e9
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_stddev() {
        let (m, s) = mean_stddev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(m, 5.0);
        assert!((s - 2.138089935).abs() < 1e-6);
        assert_eq!(mean_stddev(&[3.0]), (3.0, 0.0));
    }

    #[test]
    fn test_names_follow_llama_bench() {
        let r = |p, g| TestResult {
            n_depth: 0,
            n_prompt: p,
            n_gen: g,
            samples: vec![0.5, 1.0],
        };
        assert_eq!(r(512, 0).name(), "pp512");
        assert_eq!(r(0, 128).name(), "tg128");
        assert_eq!(r(512, 128).name(), "pp512+tg128");
        let deep = TestResult {
            n_depth: 1024,
            ..r(512, 0)
        };
        assert_eq!(deep.name(), "pp512 @ d1024");
        assert_eq!(r(0, 128).samples_ts(), vec![256.0, 128.0]);
    }

    #[test]
    fn random_tokens_stay_in_vocabulary() {
        let t = random_tokens(1000, 49152, 1);
        assert!(t.iter().all(|&x| x < 49152));
        assert_eq!(t, random_tokens(1000, 49152, 1));
    }
}
