//! The GPU runtime without a GPU: what `--gpu`, `-ngl` and `--main-gpu` do when the driver is
//! absent, broken, or a fake (`tests/data/gpu/fake_libcuda.c`, built here with `cc` and put on
//! `LD_LIBRARY_PATH`): one clear line, the right reason, no crash, the CPU's output unchanged;
//! blocks the kernels cannot run stay on the CPU while the others go to the (fake) GPU.
//! Also: every kernel source compiles to a cubin through the runtime's NVRTC path (`--recompile`)
//! and the committed PTX is what tools/build-ptx.py makes of the sources.
#![cfg(target_os = "linux")]

mod common;

use common::{assert_one_line_error, model_path};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1";

/// Runs llamafile with `args`, the driver search path set to `lib_dir`, and `env`.
fn run(lib_dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_llamafile"));
    cmd.args(args)
        .env("LD_LIBRARY_PATH", lib_dir)
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("FAKE_CUDA_INIT")
        .env_remove("FAKE_CUDA_JIT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run llamafile")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A directory holding `libcuda.so.1` built from the fake's source (`defines` for cc), made once
/// per variant.
fn fake_driver(variant: &str, defines: &[&str]) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fake-cuda-{variant}"));
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gpu/fake_libcuda.c");
    let lib = dir.join("libcuda.so.1");
    // Tests build in parallel threads of one process: each its own temporary name.
    static BUILDS: AtomicUsize = AtomicUsize::new(0);
    let n = BUILDS.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!("libcuda.so.1.{}-{n}", std::process::id()));
    let built = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&tmp)
        .args(defines)
        .arg(&src)
        .status();
    match built {
        Ok(s) if s.success() => {
            std::fs::rename(&tmp, &lib).unwrap();
            Some(dir)
        }
        Ok(s) => panic!("cc failed to build the fake driver: {s}"),
        Err(e) => {
            eprintln!("skipping: no C compiler (cc: {e}) to build the fake driver");
            None
        }
    }
}

/// An empty directory: no driver on the search path, unless the system has one.
fn no_driver() -> Option<PathBuf> {
    let system = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/lib/x86_64-linux-gnu",
    ];
    if system
        .iter()
        .any(|d| Path::new(d).join("libcuda.so.1").exists())
    {
        eprintln!("skipping: this machine has a real libcuda.so.1");
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-cuda");
    std::fs::create_dir_all(&dir).unwrap();
    Some(dir)
}

#[test]
fn gpu_nvidia_without_a_driver_is_one_line_and_a_failure() {
    let Some(dir) = no_driver() else { return };
    // The probe comes before the model is read, so no model is needed to fail.
    let out = run(
        &dir,
        &[],
        &["-m", "absent.gguf", "-p", "hi", "--gpu", "nvidia"],
    );
    assert_one_line_error(&out, "--gpu nvidia: libcuda.so.1 not found");
    let out = run(
        &dir,
        &[("CUDA_VISIBLE_DEVICES", "")],
        &["-m", "absent.gguf", "--gpu", "nvidia"],
    );
    assert_one_line_error(
        &out,
        "--gpu nvidia: CUDA_VISIBLE_DEVICES is empty: no device visible",
    );
}

#[test]
fn ngl_without_a_driver_runs_on_the_cpu_and_says_why() {
    let Some(dir) = no_driver() else { return };
    let Some(model) = model_path(SMOLLM2) else {
        return;
    };
    let m = model.to_str().unwrap();
    let base = [
        "-m",
        m,
        "-p",
        "The capital of France is",
        "-n",
        "6",
        "--temp",
        "0",
    ];
    let cpu = run(&dir, &[], &base);
    assert!(cpu.status.success(), "{}", stderr(&cpu));
    assert!(
        !stderr(&cpu).contains("gpu:"),
        "a CPU run mentions the GPU: {}",
        stderr(&cpu)
    );
    let with_ngl = run(&dir, &[], &[&base[..], &["-ngl", "99"]].concat());
    assert!(with_ngl.status.success(), "{}", stderr(&with_ngl));
    let lines: Vec<String> = stderr(&with_ngl)
        .lines()
        .filter(|l| l.starts_with("gpu:"))
        .map(String::from)
        .collect();
    assert_eq!(
        lines,
        ["gpu: none (libcuda.so.1 not found); running on CPU"]
    );
    assert_eq!(
        with_ngl.stdout, cpu.stdout,
        "offload asked for, yet the output changed"
    );
    let off = run(
        &dir,
        &[],
        &[&base[..], &["-ngl", "99", "--gpu", "disable"]].concat(),
    );
    assert!(stderr(&off).contains("gpu: none (--gpu disable); running on CPU"));
    assert_eq!(off.stdout, cpu.stdout);
}

#[test]
fn a_driver_missing_symbols_is_a_reason_not_a_crash() {
    let Some(dir) = fake_driver("only-init", &["-DONLY_INIT"]) else {
        return;
    };
    let out = run(&dir, &[], &["-m", "absent.gguf", "--gpu", "nvidia"]);
    assert_one_line_error(
        &out,
        "--gpu nvidia: libcuda.so.1 has no cuDriverGetVersion: the NVIDIA driver is too old or not a CUDA driver",
    );
}

#[test]
fn driver_errors_become_reasons() {
    let Some(dir) = fake_driver("full", &[]) else {
        return;
    };
    let nvidia = ["-m", "absent.gguf", "--gpu", "nvidia"];
    let out = run(&dir, &[("FAKE_CUDA_INIT", "999")], &nvidia);
    assert_one_line_error(
        &out,
        "--gpu nvidia: cuInit failed: CUDA_ERROR_UNKNOWN (999)",
    );
    let out = run(&dir, &[("FAKE_CUDA_INIT", "100")], &nvidia);
    assert_one_line_error(&out, "--gpu nvidia: no CUDA device found");
    let out = run(&dir, &[("FAKE_CUDA_INIT", "4242")], &nvidia);
    assert_one_line_error(
        &out,
        "--gpu nvidia: cuInit failed: unknown CUDA error (4242)",
    );
    let out = run(&dir, &[("FAKE_CUDA_DEVICES", "0")], &nvidia);
    assert_one_line_error(&out, "--gpu nvidia: no CUDA device found");
    let out = run(&dir, &[], &[&nvidia[..], &["--main-gpu", "1"]].concat());
    assert_one_line_error(&out, "--gpu nvidia: --main-gpu 1: only 1 device(s) visible");
    let out = run(&dir, &[], &[&nvidia[..], &["-mg", "-1"]].concat());
    assert_one_line_error(&out, "--main-gpu -1: expected a device index, 0 or more");
    let out = run(&dir, &[("CUDA_VISIBLE_DEVICES", " ")], &nvidia);
    assert_one_line_error(&out, "CUDA_VISIBLE_DEVICES is empty");
    // The JIT's error log is carried into the reason.
    let out = run(&dir, &[("FAKE_CUDA_JIT", "fail")], &nvidia);
    assert_one_line_error(
        &out,
        "--gpu nvidia: the driver cannot load kernel module activation: cuModuleLoadDataEx \
         failed: CUDA_ERROR_INVALID_PTX (218): ptxas fatal   : fake JIT failure",
    );
}

/// The start line of a run's stderr.
fn gpu_line(out: &Output) -> String {
    stderr(out)
        .lines()
        .find(|l| l.starts_with("gpu:"))
        .map(String::from)
        .unwrap_or_else(|| panic!("no gpu line: {}", stderr(out)))
}

#[test]
fn a_working_driver_is_named_and_takes_the_layers_asked_for() {
    let Some(dir) = fake_driver("full", &[]) else {
        return;
    };
    let Some(model) = model_path(SMOLLM2) else {
        return;
    };
    let m = model.to_str().unwrap();
    let base = [
        "-m",
        m,
        "-p",
        "The capital of France is",
        "-n",
        "2",
        "--temp",
        "0",
    ];
    // The fake accepts only the embedded PTX (NUL-terminated, sm_75): reaching the start line
    // means every module was handed over whole. Its kernels do nothing, so the numbers are
    // meaningless; what is checked is the plumbing: the line, the launches, no crash.
    let log =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("launches-{}", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let log_env = [("FAKE_CUDA_LOG", log.to_str().unwrap())];
    let out = run(&dir, &log_env, &[&base[..], &["-ngl", "99"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let line = gpu_line(&out);
    assert!(line.starts_with("gpu: Fake GPU 24GB (cc 8.6, "), "{line}");
    assert!(line.ends_with("), 30/30 layers"), "{line}");
    let launches = std::fs::read_to_string(&log).expect("no kernel was launched");
    let mut n = 0;
    for l in launches.lines() {
        let v: Vec<u32> = l
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert_eq!(v.len(), 6, "{l}");
        assert!(v.iter().all(|&d| d > 0), "an empty launch: {l}");
        assert!(v[3] * v[4] * v[5] <= 1024, "a block over 1024 threads: {l}");
        n += 1;
    }
    // The prompt's pass: 16 launches a block (norm, q, k, v, 2 rope, kv store, attention, o,
    // add, norm, gate, up, swiglu, down, add) and the head. Zero logits make token 0 (SmolLM2's
    // end of text) the greedy choice, so no further pass follows.
    assert_eq!(n, 30 * 16 + 1, "launches: {launches}");
    std::fs::remove_file(&log).unwrap();

    let out = run(&dir, &[], &[&base[..], &["-ngl", "10"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        gpu_line(&out).ends_with("), 10/30 layers"),
        "{}",
        gpu_line(&out)
    );
    let out = run(
        &dir,
        &[],
        &[&base[..], &["--gpu", "nvidia", "-ngl", "0"]].concat(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        gpu_line(&out).ends_with("), 0/30 layers"),
        "{}",
        gpu_line(&out)
    );

    // A JIT failure under auto: the CPU runs, says why, and the output is the CPU's.
    let cpu = run(&dir, &[], &base);
    let out = run(
        &dir,
        &[("FAKE_CUDA_JIT", "fail")],
        &[&base[..], &["-ngl", "99"]].concat(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        gpu_line(&out).starts_with("gpu: none (the driver cannot load kernel module activation: "),
        "{}",
        stderr(&out)
    );
    assert_eq!(out.stdout, cpu.stdout);
}

/// SmolLM2 with the `ffn_down` matrices of blocks `layers` requantized to Q5_1, a type the CUDA
/// kernels do not read, written once under the target's scratch directory.
fn smollm2_with_q5_1_ffn_down(model: &Path, layers: &[usize]) -> PathBuf {
    use llamafile::gguf::{GgufFile, GgufWriter};
    use llamafile::quant::{dequantize_row, quantize_row, GgmlType};
    let src = GgufFile::open(model).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in src.metadata() {
        w.add_kv(key, value.clone());
    }
    let names: Vec<String> = layers
        .iter()
        .map(|il| format!("blk.{il}.ffn_down.weight"))
        .collect();
    for t in src.tensors() {
        let data = src.tensor_data(t);
        if !names.contains(&t.name) {
            w.add_tensor(&t.name, &t.dims, t.ty, data).unwrap();
            continue;
        }
        let cols = t.dims[0] as usize;
        let in_row = t.ty.bytes_for(cols as u64).unwrap() as usize;
        let out_row = GgmlType::Q5_1.bytes_for(cols as u64).unwrap() as usize;
        let mut row = vec![0f32; cols];
        let mut out = vec![0u8; data.len() / in_row * out_row];
        for (src_row, dst) in data.chunks_exact(in_row).zip(out.chunks_exact_mut(out_row)) {
            dequantize_row(t.ty, src_row, &mut row);
            quantize_row(GgmlType::Q5_1, &row, dst);
        }
        w.add_tensor(&t.name, &t.dims, GgmlType::Q5_1, out).unwrap();
    }
    let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("smollm2-q5_1-down-{}.gguf", std::process::id()));
    w.write_file(&path).unwrap();
    path
}

#[test]
fn blocks_the_kernels_cannot_run_stay_on_the_cpu_and_the_rest_go_to_the_gpu() {
    let Some(dir) = fake_driver("full", &[]) else {
        return;
    };
    let Some(model) = model_path(SMOLLM2) else {
        return;
    };
    let mixed = smollm2_with_q5_1_ffn_down(&model, &[5, 25, 26]);
    let m = mixed.to_str().unwrap();
    let base = ["-m", m, "-p", "The capital of France is", "-n", "2"];
    let log = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("split-launches-{}", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let log_env = [("FAKE_CUDA_LOG", log.to_str().unwrap())];
    let args = [&base[..], &["--temp", "0", "-ngl", "99", "--gpu", "nvidia"]].concat();
    let out = run(&dir, &log_env, &args);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "llamafile: layers 5, 25..27 stay on the CPU: \
             ffn_down is Q5_1, which the CUDA kernels do not read\n"
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "llamafile: layers 0..5 on cuda0, 5..6 on cpu, 6..25 on cuda0, 25..27 on cpu, \
             27..30 on cuda0; output head on cuda0\n"
        ),
        "{err}"
    );
    let line = gpu_line(&out);
    assert!(line.ends_with("), 27/30 layers"), "{line}");
    // 16 launches for each block on the device, and the head (see the test above).
    let launches = std::fs::read_to_string(&log).expect("no kernel was launched");
    assert_eq!(launches.lines().count(), 27 * 16 + 1, "{launches}");
    std::fs::remove_file(&log).unwrap();

    // -ngl 3 asks for blocks 27..30 only: none is refused, and nothing is said about block 5.
    let out = run(&dir, &[], &[&base[..], &["-ngl", "3"]].concat());
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("stay on the CPU"), "{err}");
    assert!(gpu_line(&out).ends_with("), 3/30 layers"), "{err}");
    // -ngl 4 (blocks 26..30): block 26 stays, the GPU takes three.
    let out = run(&dir, &[], &[&base[..], &["-ngl", "4"]].concat());
    let err = stderr(&out);
    assert!(
        err.contains("llamafile: layer 26 stays on the CPU: ffn_down is Q5_1"),
        "{err}"
    );
    assert!(gpu_line(&out).ends_with("), 3/30 layers"), "{err}");
    std::fs::remove_file(&mixed).unwrap();
}

/// The pip package's libnvrtc.so, when Python has it.
fn pip_nvrtc() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import nvidia.cuda_nvrtc as p, glob, os; \
             print(sorted(glob.glob(os.path.join(p.__path__[0], 'lib', 'libnvrtc.so*')))[0])",
        ])
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    path.is_file().then_some(path)
}

#[test]
fn every_kernel_compiles_for_exact_gpus_through_the_recompile_path() {
    use llamafile::gpu::kernels::MODULES;
    use llamafile::gpu::nvrtc::Nvrtc;
    use llamafile::gpu::recompile::Compiler;
    let Some(path) = pip_nvrtc() else {
        eprintln!("skipping: no NVRTC (pip install nvidia-cuda-nvrtc-cu12==12.0.140)");
        return;
    };
    let nvrtc = Nvrtc::open(&path).expect("NVRTC has every entry point");
    for arch in ["75", "86", "90"] {
        for m in MODULES {
            let cubin = Compiler::compile(&nvrtc, m, arch)
                .unwrap_or_else(|log| panic!("{}.cu for sm_{arch}: {log}", m.name));
            assert!(cubin.starts_with(b"\x7fELF"), "{}: not a cubin", m.name);
        }
    }
    // A syntax error is an error with the compiler's log, not a crash.
    let mut broken = MODULES[0];
    broken.source = "extern \"C\" __global__ void k( { }";
    let err = Compiler::compile(&nvrtc, &broken, "75").unwrap_err();
    assert!(err.contains("error"), "{err}");
}

#[test]
fn the_committed_ptx_is_what_the_sources_give() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/build-ptx.py");
    let out = match Command::new("python3").arg(&script).arg("--check").output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("skipping: no python3 ({e})");
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => {}
        Some(2) => eprintln!("skipping: {}", text.trim()),
        _ => panic!("tools/build-ptx.py --check failed:\n{text}"),
    }
}

/// The kernels' block decoding (`gpu-src/quant.cuh`'s `Q<T>::deq32`, built for the host by
/// `tests/data/gpu/host_quant.cpp`) gives exactly the engine's dequantized rows for every weight
/// type the kernels read, on random blocks with finite scales.
#[test]
fn the_kernels_decode_every_block_layout_as_the_engine_does() {
    use half::f16;
    use llamafile::ops::QMat;
    use llamafile::quant::GgmlType;
    let Some(exe) = host_build("host_quant") else {
        return;
    };
    // (type, kernel suffix, block bytes, byte offsets of f16 scale fields in a block)
    let types: [(GgmlType, &str, usize, &[usize]); 9] = [
        (GgmlType::F32, "f32", 4, &[]),
        (GgmlType::F16, "f16", 2, &[0]),
        (GgmlType::Q4_0, "q4_0", 18, &[0]),
        (GgmlType::Q4_1, "q4_1", 20, &[0, 2]),
        (GgmlType::Q5_0, "q5_0", 22, &[0]),
        (GgmlType::Q8_0, "q8_0", 34, &[0]),
        (GgmlType::Q4K, "q4_k", 144, &[0, 2]),
        (GgmlType::Q5K, "q5_k", 176, &[0, 2]),
        (GgmlType::Q6K, "q6_k", 210, &[208]),
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (rows, cols) = (3usize, 512usize);
    for (ty, suffix, block, scales) in types {
        let row_bytes = cols / ty.block_elems() * block;
        let mut data: Vec<u8> = (0..rows * row_bytes).map(|_| next() as u8).collect();
        let finite = |next: &mut dyn FnMut() -> u64| (next() % 4001) as f32 / 1000.0 - 2.0;
        for b in data.chunks_exact_mut(block) {
            if ty == GgmlType::F32 {
                b.copy_from_slice(&finite(&mut next).to_le_bytes());
            }
            for &at in scales {
                let h = f16::from_f32(finite(&mut next)).to_bits();
                b[at..at + 2].copy_from_slice(&h.to_le_bytes());
            }
        }
        let mut child = Command::new(&exe)
            .args([suffix, &cols.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(&data).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{suffix}: host_quant failed");
        let got: Vec<f32> = out
            .stdout
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let m = QMat {
            ty,
            rows,
            cols,
            data: &data,
            x8: None,
        };
        let mut want = vec![0f32; rows * cols];
        for (r, row) in want.chunks_exact_mut(cols).enumerate() {
            m.dequantize_row(r, row);
        }
        assert_eq!(got.len(), want.len(), "{suffix}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits(),
                "{suffix}: element {} of row {}: kernel {g}, engine {w}",
                i % cols,
                i / cols
            );
        }
    }
    let _ = std::fs::remove_file(&exe);
}

/// Builds `tests/data/gpu/NAME.cpp` (a host build of kernel sources) with `c++`; `None`, after
/// saying so, when there is no C++ compiler.
fn host_build(name: &str) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let built = Command::new("c++")
        .args([
            "-std=c++17",
            "-O1",
            "-ffp-contract=off",
            "-Wall",
            "-Wno-unknown-pragmas",
            "-I",
        ])
        .arg(root.join("gpu-src"))
        .arg("-o")
        .arg(&exe)
        .arg(root.join(format!("tests/data/gpu/{name}.cpp")))
        .output();
    match built {
        Ok(o) if o.status.success() => Some(exe),
        Ok(o) => panic!(
            "the host build of {name} failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            eprintln!("skipping: no C++ compiler (c++: {e})");
            None
        }
    }
}

/// Runs a host build with `args`, `input` on stdin; its stdout.
fn run_host(exe: &Path, args: &[String], input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{} {args:?} failed", exe.display());
    out.stdout
}

fn le_bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn le_bytes_i32(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Seeded values in [-scale, scale).
fn noise(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64) as f32 * 2.0 * scale - scale
        })
        .collect()
}

/// The kernels without block-wide synchronisation (RoPE, SwiGLU, GeGLU, the vision encoder's
/// GELU, quick GELU and SiLU, soft-cap, the KV store), built for the host by
/// `tests/data/gpu/host_kernels.cpp` and run one thread at a time, give the engine's CPU
/// results: bit for bit where both use the same libm (RoPE in both layouts with frequency
/// factors and an attention factor, GeGLU's and both GELUs' f16 tables, soft-cap, the f16
/// rounding of the cache); SwiGLU within float rounding (the engine uses ggml's approximate
/// expf), SiLU within the same bound. On a GPU, cosf/sinf/expf/tanhf differ from glibc's in the
/// last bits.
#[test]
fn the_elementwise_kernels_compute_what_the_engine_does() {
    use half::f16;
    use llamafile::ops::rope::{Rope, RopeStyle};
    use std::sync::Arc;
    let Some(exe) = host_build("host_kernels") else {
        return;
    };
    // RoPE: 3 tokens at far-apart positions, 4 heads of 64, 48 rotated dimensions.
    let (n_tok, heads, hd, nd) = (3usize, 4usize, 64usize, 48usize);
    let pos = [0i32, 17, 4999];
    let factors: Vec<f32> = noise(7, nd / 2, 1.0)
        .iter()
        .map(|f| 1.0 + f.abs() * 3.0)
        .collect();
    for style in [RopeStyle::Normal, RopeStyle::Neox] {
        for ff in [None, Some(factors.clone())] {
            let rope = Rope {
                style,
                n_dims: nd,
                freq_base: 10000.0,
                freq_scale: 0.5,
                freq_factors: ff.clone().map(|f| Arc::from(f.as_slice())),
                attn_factor: 1.25,
                yarn: None,
            };
            let x = noise(3, n_tok * heads * hd, 2.0);
            let mut input = le_bytes_f32(&x);
            input.extend(le_bytes_i32(&pos));
            if let Some(f) = &ff {
                input.extend(le_bytes_f32(f));
            }
            // As the backend computes it; printed exactly ({:e} of an f32 round-trips).
            let theta_scale = rope.freq_base.powf(-2.0 / nd as f32);
            let args = vec![
                "rope".to_string(),
                n_tok.to_string(),
                heads.to_string(),
                hd.to_string(),
                nd.to_string(),
                ((style == RopeStyle::Neox) as i32).to_string(),
                format!("{theta_scale:e}"),
                format!("{:e}", rope.freq_scale),
                format!("{:e}", rope.attn_factor),
                (ff.is_some() as i32).to_string(),
            ];
            let got = floats(&run_host(&exe, &args, &input));
            let mut want = x.clone();
            for (t, row) in want.chunks_exact_mut(heads * hd).enumerate() {
                rope.apply(row, hd, pos[t] as usize);
            }
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g.to_bits() == w.to_bits(),
                    "rope {style:?}, factors {}: [{i}] kernel {g}, engine {w}",
                    ff.is_some()
                );
            }
        }
    }
    // M-RoPE (rope_multi): Qwen2-VL's sections over 64 rotated dimensions (32 pairs in sections
    // of 8, 12, 12), tokens at distinct time, height and width positions.
    {
        use llamafile::ops::mrope::{cos_sin_multi, Sections};
        let (heads, hd, nd) = (2usize, 64usize, 64usize);
        let sections = [8usize, 12, 12, 0];
        let pos4: [[i64; 4]; 3] = [[0, 0, 0, 0], [5, 3, 7, 0], [900, 31, 2, 0]];
        let rope = Rope {
            style: RopeStyle::Neox,
            n_dims: nd,
            freq_base: 1_000_000.0,
            freq_scale: 1.0,
            freq_factors: None,
            attn_factor: 1.0,
            yarn: None,
        };
        let x = noise(5, pos4.len() * heads * hd, 2.0);
        let mut input = le_bytes_f32(&x);
        let flat: Vec<i32> = pos4.iter().flatten().map(|&p| p as i32).collect();
        input.extend(le_bytes_i32(&flat));
        let theta_scale = rope.freq_base.powf(-2.0 / nd as f32);
        let mut args = vec![
            "rope_multi".to_string(),
            pos4.len().to_string(),
            heads.to_string(),
            hd.to_string(),
            nd.to_string(),
            "1".to_string(),
            format!("{theta_scale:e}"),
            format!("{:e}", rope.freq_scale),
            format!("{:e}", rope.attn_factor),
        ];
        args.extend(sections.map(|v| v.to_string()));
        let got = floats(&run_host(&exe, &args, &input));
        let mut want = x.clone();
        for (t, row) in want.chunks_exact_mut(heads * hd).enumerate() {
            let cs = cos_sin_multi(&rope, nd / 2, Sections::Shared(sections), pos4[t]);
            rope.apply_with(row, hd, &cs);
        }
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits(),
                "rope_multi: [{i}] kernel {g}, engine {w}"
            );
        }
    }
    // Activations over values spanning GELU's table range and beyond.
    let n = 1000;
    let gate = noise(11, n, 12.0);
    let up = noise(12, n, 3.0);
    let mut input = le_bytes_f32(&gate);
    input.extend(le_bytes_f32(&up));
    let got = floats(&run_host(&exe, &["geglu".into(), n.to_string()], &input));
    let mut want = gate.clone();
    llamafile::ops::activation::geglu(&mut want, &up);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits(),
            "geglu [{i}] of {}: kernel {g}, engine {w}",
            gate[i]
        );
    }
    let got = floats(&run_host(&exe, &["swiglu".into(), n.to_string()], &input));
    let mut want = gate.clone();
    llamafile::ops::activation::swiglu(&mut want, &up);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 2e-6 * w.abs().max(1e-3),
            "swiglu [{i}]: kernel {g}, engine {w}"
        );
    }
    // The vision encoder's activations in place: values past GELU's ±10 cut-offs and on them,
    // near 0 (f16 subnormals, signed zeros), and far enough out that expf overflows.
    let mut x = noise(14, n, 12.0);
    x[..20].copy_from_slice(&[
        -10.0, 10.0, -10.001, 9.999, -10.5, 10.5, -30.0, 30.0, -200.0, 200.0, 0.0, -0.0, 1e-8,
        -1e-8, 3e-5, -6e-8, 0.01, -0.01, 70000.0, -70000.0,
    ]);
    type InPlace = fn(&mut [f32]);
    let activations: [(&str, InPlace); 3] = [
        ("gelu", llamafile::vision::layers::gelu_in_place),
        ("gelu_quick", llamafile::vision::layers::gelu_quick_in_place),
        ("silu", llamafile::vision::layers::silu_in_place),
    ];
    for (kernel, engine) in activations {
        let got = floats(&run_host(
            &exe,
            &[kernel.into(), n.to_string()],
            &le_bytes_f32(&x),
        ));
        let mut want = x.clone();
        engine(&mut want);
        assert_eq!(got.len(), want.len(), "{kernel}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // Both GELUs go through f16 as ggml's tables do: bit for bit. SiLU is f32 expf
            // in both; within SwiGLU's bound, as on a GPU expf differs in the last bits.
            let ok = if kernel == "silu" {
                (g - w).abs() <= 2e-6 * w.abs().max(1e-3)
            } else {
                g.to_bits() == w.to_bits()
            };
            assert!(ok, "{kernel} [{i}] of {}: kernel {g}, engine {w}", x[i]);
        }
    }
    let x = noise(13, n, 80.0);
    let args = ["softcap".to_string(), n.to_string(), "30".to_string()];
    let got = floats(&run_host(&exe, &args, &le_bytes_f32(&x)));
    let mut want = x.clone();
    llamafile::ops::softcap::softcap_all(&mut want, 30.0);
    assert_eq!(got, want, "softcap");
    // The KV store: rows to their positions, rounded to f16 as the host cache rounds; values
    // past f16's range, subnormals and ties included.
    let (n_tok, d, n_ctx) = (3usize, 96usize, 8usize);
    let mut k = noise(21, n_tok * d, 4.0);
    k[..7].copy_from_slice(&[
        70000.0,
        -65519.0,
        3.0e-6,
        2.0f32.powi(-25),
        1.0 + 2.0f32.powi(-11),
        1.0 + 3.0 * 2.0f32.powi(-11),
        6.0e-8,
    ]);
    let v = noise(22, n_tok * d, 1.0e-3);
    let pos = [5i32, 0, 7];
    let mut input = le_bytes_f32(&k);
    input.extend(le_bytes_f32(&v));
    input.extend(le_bytes_i32(&pos));
    let args = [
        "kv_store".to_string(),
        n_tok.to_string(),
        d.to_string(),
        n_ctx.to_string(),
    ];
    let out = run_host(&exe, &args, &input);
    let halves: Vec<u16> = out
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let (kc, vc) = halves.split_at(n_ctx * d);
    for (t, &p) in pos.iter().enumerate() {
        for i in 0..d {
            let at = p as usize * d + i;
            let key = k[t * d + i];
            assert_eq!(
                kc[at],
                f16::from_f32(key).to_bits(),
                "key {t},{i} = {key:e}"
            );
            assert_eq!(
                vc[at],
                f16::from_f32(v[t * d + i]).to_bits(),
                "value {t},{i}"
            );
        }
    }
    assert!(
        kc[d..2 * d].iter().all(|&h| h == 0),
        "a position no token named was written"
    );
    let _ = std::fs::remove_file(&exe);
}

/// The kernel suffix, block bytes and f16 scale offsets of each weight type the kernels read.
const LAYOUTS: [(llamafile::quant::GgmlType, &str, usize, &[usize]); 9] = {
    use llamafile::quant::GgmlType as T;
    [
        (T::F32, "f32", 4, &[]),
        (T::F16, "f16", 2, &[0]),
        (T::Q4_0, "q4_0", 18, &[0]),
        (T::Q4_1, "q4_1", 20, &[0, 2]),
        (T::Q5_0, "q5_0", 22, &[0]),
        (T::Q8_0, "q8_0", 34, &[0]),
        (T::Q4K, "q4_k", 144, &[0, 2]),
        (T::Q5K, "q5_k", 176, &[0, 2]),
        (T::Q6K, "q6_k", 210, &[208]),
    ]
};

/// `rows` random weight rows of `cols` in the layout at `LAYOUTS[which]`, with finite scales
/// (small, so products stay in range), and their dequantized values from the engine.
fn random_weights(which: usize, rows: usize, cols: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
    use half::f16;
    let (ty, _, block, scales) = LAYOUTS[which];
    let row_bytes = cols / ty.block_elems() * block;
    let bytes: Vec<u8> = noise(seed, rows * row_bytes, 1.0)
        .iter()
        .map(|v| ((v + 1.0) * 127.9) as u8)
        .collect();
    let small = noise(seed + 1, bytes.len() / block + 1, 0.05);
    let mut data = bytes;
    for (b, s) in data.chunks_exact_mut(block).zip(&small) {
        if ty == llamafile::quant::GgmlType::F32 {
            b.copy_from_slice(&(s * 20.0).to_le_bytes());
        }
        for &at in scales {
            let h = f16::from_f32(*s).to_bits();
            b[at..at + 2].copy_from_slice(&h.to_le_bytes());
        }
    }
    let m = llamafile::ops::QMat {
        ty,
        rows,
        cols,
        data: &data,
        x8: None,
    };
    let mut values = vec![0f32; rows * cols];
    for (r, row) in values.chunks_exact_mut(cols).enumerate() {
        m.dequantize_row(r, row);
    }
    (data, values)
}

/// The kernels that synchronise (warp shuffles, __syncthreads), built for the host by
/// `tests/data/gpu/host_threads.cpp` with one std::thread per CUDA thread, against the engine:
/// matrix-vector (1 and 3 tokens) and tiled products (partial 64x64 tiles) for every weight type
/// against f64 dot products of the engine's dequantized rows; embedding rows, RMS norm, the
/// vision encoder's LayerNorm and argmax exactly; attention (GQA, a sliding window, soft-capping, several tokens, several chunks of
/// positions) and softmax against f64.
#[test]
fn the_synchronising_kernels_compute_what_the_engine_does() {
    use half::f16;
    let Some(exe) = host_build_threads() else {
        return;
    };
    for (which, &(ty, suffix, _, _)) in LAYOUTS.iter().enumerate() {
        // Float rows may end in a partial unit of 32 (80 = 2.5 units).
        let widths: &[usize] = match ty {
            llamafile::quant::GgmlType::F32 | llamafile::quant::GgmlType::F16 => &[512, 80],
            _ => &[512],
        };
        for (kernel, rows, n_tok, cols) in widths.iter().flat_map(|&c| {
            [
                ("matvec", 9usize, 1usize, c),
                ("matvec", 9, 3, c),
                ("matmul", 70, 67, c),
            ]
        }) {
            let (w, wv) = random_weights(which, rows, cols, 40 + which as u64);
            let x = noise(50 + n_tok as u64, n_tok * cols, 1.0);
            let mut input = w.clone();
            input.extend(le_bytes_f32(&x));
            let args = [kernel, suffix]
                .map(String::from)
                .into_iter()
                .chain([rows, cols, n_tok].map(|v| v.to_string()));
            let got = floats(&run_host(&exe, &args.collect::<Vec<_>>(), &input));
            assert_eq!(got.len(), n_tok * rows);
            for t in 0..n_tok {
                for r in 0..rows {
                    let terms = (0..cols).map(|c| wv[r * cols + c] as f64 * x[t * cols + c] as f64);
                    let want: f64 = terms.clone().sum();
                    let size: f64 = terms.map(f64::abs).sum();
                    let g = got[t * rows + r] as f64;
                    assert!(
                        (g - want).abs() <= 1e-5 * size + 1e-6,
                        "{kernel}_{suffix} {cols} columns, token {t} row {r}: kernel {g}, f64 {want}"
                    );
                }
            }
        }
        // Embedding rows, scaled.
        let (w, wv) = random_weights(which, 6, 256, 60);
        let ids = [5i32, 0, 5, 2];
        let mut input = w;
        input.extend(le_bytes_i32(&ids));
        let args = ["get_rows", suffix, "6", "256", "4", "1.5"].map(String::from);
        let got = floats(&run_host(&exe, &args, &input));
        for (i, &id) in ids.iter().enumerate() {
            let want: Vec<f32> = wv[id as usize * 256..][..256]
                .iter()
                .map(|v| v * 1.5)
                .collect();
            assert_eq!(got[i * 256..][..256], want[..], "get_rows_{suffix} id {id}");
        }
    }
    // RMS norm, exactly the engine's.
    let (rows, cols) = (5usize, 576usize);
    let x = noise(70, rows * cols, 3.0);
    let w = noise(71, cols, 1.0);
    let mut input = le_bytes_f32(&x);
    input.extend(le_bytes_f32(&w));
    let got = floats(&run_host(
        &exe,
        &["rms_norm", "5", "576", "1e-5"].map(String::from),
        &input,
    ));
    let mut want = vec![0f32; rows * cols];
    llamafile::ops::norm::rms_norm_rows_into(&x, &w, cols, 1e-5, &mut want);
    assert_eq!(got, want, "rms_norm");
    // The vision encoder's LayerNorm, exactly the engine's: a short row (half the block idle)
    // and one not a whole number of block strides. Both sum in f64, in different orders, and
    // round the mean and variance to f32; the f64 sums differ in their last bits at most, far
    // below an f32's rounding step, so the f32s agree (as RMS norm's do) and so does the rest,
    // the same f32 operations in the same order.
    for cols in [128usize, 1152] {
        let rows = 3;
        let x: Vec<f32> = noise(72, rows * cols, 3.0)
            .iter()
            .map(|v| v + 0.7)
            .collect();
        let w = noise(73, cols, 1.0);
        let b = noise(74, cols, 0.5);
        let mut input = le_bytes_f32(&x);
        input.extend(le_bytes_f32(&w));
        input.extend(le_bytes_f32(&b));
        let args = [rows.to_string(), cols.to_string(), "1e-6".to_string()];
        let args = [&["layer_norm".to_string()][..], &args].concat();
        let got = floats(&run_host(&exe, &args, &input));
        let mut want = x.clone();
        llamafile::vision::layers::layer_norm_rows(&mut want, cols, &w, &b, 1e-6);
        assert_eq!(got, want, "layer_norm {rows}x{cols}");
    }
    // Attention: 3 tokens of 4 query heads over 2 kv heads of 64, 300 cached positions (three
    // chunks of 128), with and without a window and a soft-cap.
    let (n_tok, nh, nkv, hd, n_ctx) = (3usize, 4usize, 2usize, 64usize, 300usize);
    let kv_dim = nkv * hd;
    let q = noise(80, n_tok * nh * hd, 1.0);
    // Keys grow with the position, so later chunks raise the running maximum (and the
    // accumulator must be rescaled).
    let keys: Vec<f16> = noise(81, n_ctx * kv_dim, 1.0)
        .iter()
        .enumerate()
        .map(|(i, &v)| f16::from_f32(v * (0.5 + (i / kv_dim) as f32 / 40.0)))
        .collect();
    let values: Vec<f16> = noise(82, n_ctx * kv_dim, 1.0)
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    let pos = [0i32, 150, 250];
    // see_until >= 0: every token sees up to it (bidirectional rows), its window still counted
    // from its own position.
    for (softcap, window, see_until) in [
        (0.0f32, 0usize, -1i32),
        (0.0, 100, -1),
        (20.0, 0, -1),
        (20.0, 37, -1),
        (0.0, 0, 299),
        (0.0, 100, 299),
    ] {
        let mut input = le_bytes_f32(&q);
        input.extend(keys.iter().flat_map(|h| h.to_bits().to_le_bytes()));
        input.extend(values.iter().flat_map(|h| h.to_bits().to_le_bytes()));
        input.extend(le_bytes_i32(&pos));
        let args: Vec<String> = ["attention".to_string()]
            .into_iter()
            .chain([n_tok, nh, nkv, hd, n_ctx].map(|v| v.to_string()))
            .chain(["0.125".to_string(), softcap.to_string(), window.to_string()])
            .chain([see_until.to_string()])
            .collect();
        let got = floats(&run_host(&exe, &args, &input));
        for t in 0..n_tok {
            let own = pos[t] as usize;
            let first = if window > 0 {
                (own + 1).saturating_sub(window)
            } else {
                0
            };
            let p = if see_until >= 0 {
                see_until as usize
            } else {
                own
            };
            for h in 0..nh {
                // In f64: the engine's CPU attention mimics ggml's, whose accumulator is f16.
                let kvh = h / (nh / nkv);
                let qh = &q[(t * nh + h) * hd..][..hd];
                let row = |c: &[f16], p: usize| -> Vec<f64> {
                    c[p * kv_dim + kvh * hd..][..hd]
                        .iter()
                        .map(|v| v.to_f64())
                        .collect()
                };
                let scores: Vec<f64> = (first..=p)
                    .map(|j| {
                        let dot: f64 = row(&keys, j)
                            .iter()
                            .zip(qh)
                            .map(|(k, q)| k * *q as f64)
                            .sum();
                        let s = dot * 0.125;
                        if softcap > 0.0 {
                            softcap as f64 * (s / softcap as f64).tanh()
                        } else {
                            s
                        }
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let total: f64 = weights.iter().sum();
                let g = &got[(t * nh + h) * hd..][..hd];
                for (d, &kernel) in g.iter().enumerate() {
                    let want: f64 = (first..=p)
                        .zip(&weights)
                        .map(|(j, w)| w * row(&values, j)[d])
                        .sum::<f64>()
                        / total;
                    let a = kernel as f64;
                    assert!(
                        (a - want).abs() <= 1e-5 + 1e-4 * want.abs(),
                        "attention cap {softcap} window {window} until {see_until} token {t} head {h} dim {d}: kernel {a}, f64 {want}"
                    );
                }
            }
        }
    }
    // Argmax (ties to the lowest index) and softmax over vocabulary-sized rows.
    let n = 5000;
    let mut x = noise(90, 2 * n, 10.0);
    x[n + 4321] = 50.0;
    x[n + 4322] = 50.0;
    let got = run_host(
        &exe,
        &["argmax", "2", "5000"].map(String::from),
        &le_bytes_f32(&x),
    );
    let idx: Vec<i32> = got
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let first_max = |row: &[f32]| {
        let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        row.iter().position(|&v| v == m).unwrap() as i32
    };
    assert_eq!(idx, vec![first_max(&x[..n]), 4321]);
    let got = floats(&run_host(
        &exe,
        &["softmax", "2", "5000"].map(String::from),
        &le_bytes_f32(&x),
    ));
    for row in 0..2 {
        let r = &x[row * n..][..n];
        let m = r.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
        let sum: f64 = r.iter().map(|&v| (v as f64 - m).exp()).sum();
        for (i, &v) in r.iter().enumerate() {
            let want = (v as f64 - m).exp() / sum;
            let g = got[row * n + i] as f64;
            assert!(
                (g - want).abs() <= 1e-6 + 1e-5 * want,
                "softmax [{row}][{i}]: {g} vs {want}"
            );
        }
    }
    let _ = std::fs::remove_file(&exe);
}

/// `tests/data/gpu/host_threads.cpp` built with `c++` (C++20 for std::barrier, threads).
fn host_build_threads() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("host_threads-{}", std::process::id()));
    let built = Command::new("c++")
        .args([
            "-std=c++20",
            "-O1",
            "-ffp-contract=off",
            "-pthread",
            "-Wall",
            "-Wno-unknown-pragmas",
            "-I",
        ])
        .arg(root.join("gpu-src"))
        .arg("-o")
        .arg(&exe)
        .arg(root.join("tests/data/gpu/host_threads.cpp"))
        .output();
    match built {
        Ok(o) if o.status.success() => Some(exe),
        Ok(o) => panic!(
            "the host build of host_threads failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            eprintln!("skipping: no C++ compiler (c++: {e})");
            None
        }
    }
}

/// Kernel launches of one `-n 1` run of `model` on the working fake with `-ngl ngl`.
fn launches_with_ngl(dir: &Path, model: &str, ngl: &str) -> usize {
    let log = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("head-launches-{ngl}-{}", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let log_env = [("FAKE_CUDA_LOG", log.to_str().unwrap())];
    let args = [
        "-m", model, "-p", "Hello", "-n", "1", "--temp", "0", "-ngl", ngl,
    ];
    let out = run(dir, &log_env, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let n = std::fs::read_to_string(&log).map_or(0, |s| s.lines().count());
    let _ = std::fs::remove_file(&log);
    n
}

/// Gemma 2's final soft-cap is the engine's, on the host, whichever backend computed the
/// logits: the device's output head is its matrix product alone (one launch). A device soft-cap
/// as well capped the logits twice, which the greedy text hides (tanh keeps the order) but
/// perplexity showed on an H200 (docs/gpu.md).
#[test]
fn the_output_head_on_the_device_does_not_soft_cap_again() {
    let Some(dir) = fake_driver("full", &[]) else {
        return;
    };
    let Some(model) = common::synth::synth_model_of("gemma2", "q8_0") else {
        return;
    };
    let m = model.to_str().unwrap();
    // 4 blocks: -ngl 4 puts them all on the device and keeps the head on the host; -ngl 5
    // adds the head.
    let blocks_only = launches_with_ngl(&dir, m, "4");
    let with_head = launches_with_ngl(&dir, m, "5");
    assert!(blocks_only > 0, "no kernel was launched");
    assert_eq!(with_head, blocks_only + 1, "the head should be one launch");
}

/// The arguments of a one-token run of `text` and `mmproj` with the image `pic` and `-ngl 99`.
fn image_args(text: &Path, mmproj: &Path, pic: &Path) -> Vec<String> {
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let mut args = vec![
        "-m".to_string(),
        path(text),
        "--mmproj".into(),
        path(mmproj),
    ];
    args.extend(["--image".to_string(), path(pic)]);
    args.extend(
        [
            "-p",
            "What is this?",
            "-n",
            "1",
            "--temp",
            "0",
            "-ngl",
            "99",
        ]
        .map(String::from),
    );
    args
}

/// The fake driver's launch count of one `-n 1` LLaVA run with an image, `-ngl 99` and `extra`,
/// and its stderr.
fn image_run_launches(dir: &Path, extra: &[&str], tag: &str) -> Option<(usize, String)> {
    pair_run_launches(common::llava::pair()?, dir, extra, tag)
}

/// [`image_run_launches`] for the text model and projector `pair`.
fn pair_run_launches(
    (text, mmproj): (PathBuf, PathBuf),
    dir: &Path,
    extra: &[&str],
    tag: &str,
) -> Option<(usize, String)> {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let pic = tmp.join(format!("gpu-encoder-{tag}-{}.png", std::process::id()));
    std::fs::write(&pic, common::llava::picture_png(84, 84)).unwrap();
    let log = tmp.join(format!("encoder-launches-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let args = image_args(&text, &mmproj, &pic);
    let out = run(
        dir,
        &[("FAKE_CUDA_LOG", log.to_str().unwrap())],
        &[
            &args.iter().map(String::as_str).collect::<Vec<_>>()[..],
            extra,
        ]
        .concat(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let n = std::fs::read_to_string(&log).map_or(0, |l| l.lines().count());
    std::fs::remove_file(&log).ok();
    std::fs::remove_file(&pic).ok();
    Some((n, stderr(&out)))
}

#[test]
fn the_image_encoder_goes_to_the_gpu_unless_told_not_to() {
    let Some(dir) = fake_driver("full", &[]) else {
        return;
    };
    let Some((with, err_with)) = image_run_launches(&dir, &[], "on") else {
        return;
    };
    let (without, err_without) =
        image_run_launches(&dir, &["--no-mmproj-offload"], "off").expect("the pair was made above");
    let line =
        "gpu: the image encoder's matrix products and attention run on the Fake GPU 24GB too";
    assert!(err_with.contains(line), "{err_with}");
    assert!(!err_without.contains("image encoder"), "{err_without}");
    // With no blocks on the GPU but a GPU asked for, the encoder alone goes there (llama.cpp
    // offloads the projector whatever -ngl says).
    let (alone, err_alone) = image_run_launches(&dir, &["-ngl", "0", "--gpu", "nvidia"], "alone")
        .expect("the pair was made above");
    assert!(err_alone.contains(line), "{err_alone}");
    assert!(err_alone.contains(", 0/"), "{err_alone}");
    assert_eq!(alone, with - without, "the encoder's launches alone");
    // The text model's launches are the same both ways. The encoder's blocks run on the device
    // as one run: for each, two layer norms, six products, a bias add after each product that
    // has a bias, the key/value store, attention, the activation and two residual adds; then
    // the MLP head's two products one at a time (its biases on the CPU). The patch embedding is
    // its own product, on the CPU.
    let (_, mmproj) = common::llava::pair().unwrap();
    let (blocks, depth) = tower_block_launches(&mmproj);
    assert!(blocks > 13 * depth, "the synthetic CLIP has biases");
    assert_eq!(with - without, blocks + 2, "{with} against {without}");
}

/// The device launches of one pass through `mmproj`'s tower run whole on the device, and its
/// depth: for each block, two layer norms, six products, a bias add after each product that
/// has a bias, the key/value store, attention, the activation and two residual adds.
fn tower_block_launches(mmproj: &Path) -> (usize, usize) {
    let file = std::sync::Arc::new(llamafile::gguf::GgufFile::open(mmproj).unwrap());
    let biases = |il: usize| {
        [
            "attn_q", "attn_k", "attn_v", "attn_out", "ffn_up", "ffn_down",
        ]
        .iter()
        .filter(|t| {
            let name = format!("v.blk.{il}.{t}.bias");
            file.tensors().iter().any(|i| i.name == name)
        })
        .count()
    };
    let proj = llamafile::vision::Projector::load(file.clone()).unwrap();
    let depth = proj.hparams.blocks_run(proj.ty);
    ((0..depth).map(|il| 13 + biases(il)).sum(), depth)
}

/// MiniCPM-V's SigLIP tower takes the device's whole-block path as LLaVA's CLIP does, and the
/// resampler's six products (kv, q, k, v, out, proj) go there one at a time; its cross
/// attention, layer norms and key positions stay on the CPU. A small picture is the overview
/// alone: one pass.
#[test]
fn minicpmv_tower_and_resampler_products_go_to_the_gpu() {
    let Some(dir) = fake_driver("full", &[]) else {
        return;
    };
    let Some(pair) = common::llava::family_pair("minicpmv") else {
        return;
    };
    let mmproj = pair.1.clone();
    let (with, err_with) = pair_run_launches(pair.clone(), &dir, &[], "minicpmv-on").unwrap();
    let (without, err_without) =
        pair_run_launches(pair, &dir, &["--no-mmproj-offload"], "minicpmv-off").unwrap();
    assert!(err_with.contains("the image encoder's"), "{err_with}");
    assert!(!err_without.contains("image encoder"), "{err_without}");
    let (blocks, _) = tower_block_launches(&mmproj);
    assert_eq!(with - without, blocks + 6, "{with} against {without}");
}

#[test]
fn gemma3_images_read_bidirectionally_run_with_the_blocks_on_the_gpu() {
    let Some(dir) = fake_driver("full", &[]) else {
        return;
    };
    let Some((text, mmproj)) = common::llava::family_pair("gemma3") else {
        return;
    };
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let pic = tmp.join(format!("gpu-gemma3-{}.png", std::process::id()));
    std::fs::write(&pic, common::llava::picture_png(84, 84)).unwrap();
    let args = image_args(&text, &mmproj, &pic);
    // The CUDA backend reads the image's rows bidirectionally (attention's see_until), so the
    // projector is no longer refused with the blocks there.
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&dir, &[], &args);
    std::fs::remove_file(&pic).ok();
    assert!(out.status.success(), "{}", stderr(&out));
    let line = gpu_line(&out);
    assert!(line.ends_with("layers"), "{line}");
    assert!(!line.contains(" 0/"), "{line}");
}
