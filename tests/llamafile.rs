//! The single-file llamafile end to end, through the real binaries: packing a model with
//! `packaging/make-llamafile.sh`, running it with no `-m` (the weights come from its own ZIP
//! and are mapped in place), `.args` defaults, one clear line for every bad input, and the
//! portability promises (libc-family NEEDED entries only, no AVX needed, no network needed).
//!
//! Tools that only some machines have (`readelf`, `qemu-x86_64`, `unshare`) are skipped with a
//! note, except under CI (`CI` set, or `LLAMAFILE_REQUIRE_MODELS=1`), where `.ci/run` installs
//! them and a missing one is a failure.

mod common;

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use llamafile::bundle::Bundle;

const SMOLLM2: &str = "SmolLM2-135M-Instruct.Q4_1";
const FRANCE: &str = "The capital of France is";

fn llamafile_bin() -> &'static str {
    env!("CARGO_BIN_EXE_llamafile")
}

fn zipalign_bin() -> &'static str {
    env!("CARGO_BIN_EXE_zipalign")
}

/// Under CI a missing tool is a failure, not a skip.
fn strict() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
        || std::env::var("LLAMAFILE_REQUIRE_MODELS").as_deref() == Ok("1")
}

/// Whether `tool` can be run; says why not (or fails under CI) when it cannot.
fn have_tool(tool: &str, package: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert!(
            !strict(),
            "{tool} is missing (apt-get install {package}); .ci/run installs it"
        );
        eprintln!("skipping: {tool} not found (apt-get install {package})");
    }
    found
}

/// A fresh, empty directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("llamafile-tests")
        .join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The output of a run that must succeed.
fn ok(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        stderr_of(&out)
    );
    assert!(!stderr_of(&out).contains("panicked"), "{what} panicked");
    stdout_of(&out)
}

fn run(exe: &Path, args: &[&str]) -> Output {
    Command::new(exe)
        .args(args)
        .current_dir(exe.parent().unwrap())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()))
}

/// A failed run must say what is wrong in one line on stderr, containing `expected`.
fn assert_one_clear_error(what: &str, out: &Output, expected: &str) {
    let err = stderr_of(out);
    assert!(!out.status.success(), "{what}: succeeded; stderr: {err}");
    assert!(!err.contains("panicked"), "{what}: panicked: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{what}: not one line: {err:?}");
    assert!(
        lines[0].starts_with("llamafile: error: ") && lines[0].contains(expected),
        "{what}: expected an error mentioning {expected:?}, got {:?}",
        lines[0]
    );
}

/// llama.cpp's greedy continuation of `prompt` (its first `n` tokens, stopping before an
/// end-of-generation token) from the reference file of SmolLM2.
fn reference_continuation(model: &Path, prompt: &str, n: usize) -> String {
    let reference = common::reference(SMOLLM2);
    let gens = reference["generate"].as_array().expect("generate entries");
    let entry = gens
        .iter()
        .find(|g| g["prompt"] == prompt)
        .unwrap_or_else(|| panic!("no reference generation for {prompt:?}"));
    let eog = llamafile::engine::load_model(model.to_str().unwrap(), None)
        .expect("load SmolLM2")
        .tokenizer;
    let mut text = String::new();
    for step in entry["steps"].as_array().unwrap().iter().take(n) {
        if eog.is_eog(step["id"].as_u64().unwrap() as u32) {
            break;
        }
        text.push_str(step["piece"].as_str().unwrap());
    }
    text
}

/// SmolLM2 packed once by `packaging/make-llamafile.sh` (with the binaries this test built).
fn smollm2_llamafile() -> Option<&'static (PathBuf, PathBuf)> {
    static PACKED: OnceLock<Option<(PathBuf, PathBuf)>> = OnceLock::new();
    PACKED
        .get_or_init(|| {
            let model = common::model_path(SMOLLM2)?;
            let dir = scratch("packed");
            let out = dir.join("smollm2.llamafile");
            ok("make-llamafile.sh", make_llamafile(&[&model, &out]));
            Some((out, model))
        })
        .as_ref()
}

fn make_llamafile(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    make_llamafile_with(args, &[])
}

/// make-llamafile.sh with extra environment variables, under umask 022.
fn make_llamafile_with(args: &[&dyn AsRef<std::ffi::OsStr>], env: &[(&str, &str)]) -> Output {
    make_llamafile_umask(args, env, "022")
}

/// make-llamafile.sh with extra environment variables, under `umask`.
fn make_llamafile_umask(
    args: &[&dyn AsRef<std::ffi::OsStr>],
    env: &[(&str, &str)],
    umask: &str,
) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/make-llamafile.sh");
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("umask {umask}; exec \"$0\" \"$@\""))
        .arg(script)
        .args(args.iter().map(|a| a.as_ref()))
        .env("LLAMAFILE_BIN", llamafile_bin())
        .env("ZIPALIGN_BIN", zipalign_bin())
        .envs(env.iter().copied());
    cmd.output().expect("run make-llamafile.sh")
}

/// A copy of the binary with `files` (name, contents) packed into it by zipalign.
fn packed_binary(dir: &Path, name: &str, files: &[(&str, &[u8])]) -> PathBuf {
    let exe = dir.join(name);
    fs::copy(llamafile_bin(), &exe).unwrap();
    let inputs = dir.join(format!("{name}.inputs"));
    fs::create_dir_all(&inputs).unwrap();
    let mut cmd = Command::new(zipalign_bin());
    cmd.arg("-j").arg(&exe);
    for (file, bytes) in files {
        fs::write(inputs.join(file), bytes).unwrap();
        cmd.arg(inputs.join(file));
    }
    ok("zipalign", cmd.output().unwrap());
    exe
}

/// A llamafile whose `.args` is `text` with `{model}` replaced by the quoted model path; the
/// weights stay on disk, so each case costs a copy of the binary only.
fn with_args(dir: &Path, name: &str, model: &Path, text: &str) -> PathBuf {
    let text = text.replace("{model}", &format!("'{}'", model.display()));
    packed_binary(dir, name, &[(".args", text.as_bytes())])
}

#[test]
fn packed_llamafile_continues_like_llama_cpp_without_m() {
    let Some((exe, model)) = smollm2_llamafile() else {
        return;
    };
    // The script's .args names the model, then leaves the rest to the user.
    let bundle = Bundle::open(exe).unwrap().expect("a ZIP");
    let args = String::from_utf8(bundle.read_small(".args").unwrap()).unwrap();
    let lines: Vec<&str> = args.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines, ["-m", "SmolLM2-135M-Instruct.Q4_1.gguf", "..."]);
    let weights = bundle.locate("SmolLM2-135M-Instruct.Q4_1.gguf").unwrap();
    assert_eq!(weights.offset % 65536, 0, "GGUF data not page-aligned");
    assert_eq!(weights.len, fs::metadata(model).unwrap().len());

    let started = Instant::now();
    let out = ok(
        "smollm2.llamafile",
        run(exe, &["-p", FRANCE, "-n", "16", "--temp", "0"]),
    );
    eprintln!("16 tokens in {:?}", started.elapsed());
    assert_eq!(out, reference_continuation(model, FRANCE, 16));
}

/// Sums of the file ranges of `path` mapped in `maps` (text of /proc/PID/maps), and the
/// paths of every other file-backed mapping.
fn mapped_ranges(maps: &str, path: &Path) -> (Vec<(u64, u64)>, Vec<String>) {
    let mut ours = Vec::new();
    let mut others = Vec::new();
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 {
            continue;
        }
        let name = fields[5..].join(" ");
        if Path::new(&name) == path {
            let (start, end) = fields[0].split_once('-').unwrap();
            let start = u64::from_str_radix(start, 16).unwrap();
            let end = u64::from_str_radix(end, 16).unwrap();
            let offset = u64::from_str_radix(fields[2], 16).unwrap();
            ours.push((offset, offset + (end - start)));
        } else {
            others.push(name);
        }
    }
    (ours, others)
}

/// Whether the union of `ranges` covers `[start, end)`.
fn covers(mut ranges: Vec<(u64, u64)>, start: u64, end: u64) -> bool {
    ranges.sort();
    let mut reached = start;
    for (a, b) in ranges {
        if a <= reached && b > reached {
            reached = b;
        }
    }
    reached >= end
}

fn status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

#[test]
fn weights_are_mapped_from_the_llamafile_itself_with_no_copy() {
    let Some((exe, model)) = smollm2_llamafile() else {
        return;
    };
    let exe = fs::canonicalize(exe).unwrap();
    let file_len = fs::metadata(&exe).unwrap().len();
    let weights = Bundle::open(&exe)
        .unwrap()
        .unwrap()
        .locate("/zip/SmolLM2-135M-Instruct.Q4_1.gguf")
        .unwrap();
    let n_ctx = 512u64;
    let config = llamafile::engine::load_model(model.to_str().unwrap(), None)
        .unwrap()
        .model
        .config
        .clone();
    // f16 keys and values for every layer and position.
    let kv_bytes = 2 * 2 * config.n_layer as u64 * n_ctx * config.kv_dim() as u64;
    let budget_kib = (file_len + kv_bytes) * 12 / 10 / 1024;

    let mut child = Command::new(&exe)
        // Two threads: per-thread scratch must not make the budget depend on the machine.
        .args([
            "-p", FRANCE, "-n", "96", "--temp", "0", "-c", "512", "-t", "2",
        ])
        .current_dir(exe.parent().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut pipes = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let (mut out, mut err) = (String::new(), String::new());
        pipes.0.read_to_string(&mut out).unwrap();
        pipes.1.read_to_string(&mut err).unwrap();
        (out, err)
    });
    let mut mapped_snapshot: Option<String> = None;
    let (mut peak_rss, mut hwm) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) {
            let (ours, _) = mapped_ranges(&maps, &exe);
            if covers(
                ours,
                weights.offset / 4096 * 4096,
                weights.offset + weights.len,
            ) {
                mapped_snapshot = Some(maps);
            }
        }
        if let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) {
            peak_rss = peak_rss.max(status_kib(&status, "VmRSS:").unwrap_or(0));
            hwm = hwm.max(status_kib(&status, "VmHWM:").unwrap_or(0));
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            child.kill().ok();
            panic!("the llamafile did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let (out, err) = reader.join().unwrap();
    assert!(status.success(), "the llamafile failed: {err}");
    assert!(
        out.starts_with(&reference_continuation(model, FRANCE, 16)),
        "unexpected output: {out:?}"
    );

    let maps = mapped_snapshot.expect("never saw the GGUF's bytes mapped from the llamafile");
    let (_, others) = mapped_ranges(&maps, &exe);
    let copies: Vec<&String> = others
        .iter()
        .filter(|n| {
            n.to_ascii_lowercase().contains(".gguf")
                || n.contains("llamafile")
                || n.contains("memfd:")
                || n.ends_with("(deleted)")
        })
        .collect();
    assert!(copies.is_empty(), "other mappings of the model: {copies:?}");
    let peak = peak_rss.max(hwm);
    eprintln!(
        "peak resident {} MiB; budget {} MiB (file {} MiB + KV {} MiB, +20%)",
        peak / 1024,
        budget_kib / 1024,
        file_len >> 20,
        kv_bytes >> 20
    );
    assert!(peak > 0, "never read VmRSS/VmHWM");
    assert!(
        peak < budget_kib,
        "resident memory {peak} KiB exceeds file + KV cache + 20% = {budget_kib} KiB"
    );
}

#[test]
fn args_placeholder_in_the_middle_end_or_absent_decides_who_overrides() {
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    let dir = scratch("args-placeholder");
    let four = reference_continuation(&model, FRANCE, 4);
    let two = reference_continuation(&model, FRANCE, 2);
    assert_ne!(four, two);

    // Middle: the user's -n overrides the -n before `...`; the -p after it wins over theirs.
    let exe = with_args(
        &dir,
        "middle",
        &model,
        "-m {model}\n--temp 0\n-n 2\n...\n-p 'The capital of France is'\n",
    );
    assert_eq!(ok("middle", run(&exe, &["-n", "4", "-p", "Hello"])), four);

    // End: the user's arguments come last, so they override every default.
    let exe = with_args(
        &dir,
        "end",
        &model,
        "-m {model}\n--temp 0\n-n 2\n-p 'Hello'\n...\n",
    );
    assert_eq!(ok("end", run(&exe, &["-n", "4", "-p", FRANCE])), four);
    assert_eq!(ok("end, defaults", run(&exe, &["-p", FRANCE])), two);

    // Absent: as at the end.
    let exe = with_args(
        &dir,
        "absent",
        &model,
        "-m {model} --temp 0 -n 2 -p 'Hello'",
    );
    assert_eq!(ok("absent", run(&exe, &["-n", "4", "-p", FRANCE])), four);
}

#[test]
fn args_quotes_keep_spaces_and_comments_are_ignored() {
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    let dir = scratch("args-quotes");
    let expected = reference_continuation(&model, FRANCE, 3);
    // Double quotes; comments that would change the mode, or break parsing, if obeyed.
    let exe = with_args(
        &dir,
        "double",
        &model,
        "# --tokenize\n-m {model}   # the model, -p 'unterminated\n--temp 0\n\
         --prompt \"The capital of France is\"\n  # -n 1\n-n 3\n...\n",
    );
    assert_eq!(ok("double quotes", run(&exe, &[])), expected);
    // Single quotes joined to a flag.
    let exe = with_args(
        &dir,
        "single",
        &model,
        "-m {model} --temp 0 -n 3 --prompt='The capital of France is'",
    );
    assert_eq!(ok("single quotes", run(&exe, &[])), expected);
}

#[test]
fn mode_flag_inside_args_takes_effect() {
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    let dir = scratch("args-mode");
    let exe = with_args(&dir, "tokenize", &model, "-m {model}\n--tokenize\n...\n");
    let out = ok("--tokenize from .args", run(&exe, &["-p", "Hello world"]));
    let ids: Vec<u64> = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("not a JSON array of ids: {out:?}: {e}"));
    let reference = common::reference(SMOLLM2);
    let hello = reference["tokenize"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["text"] == "Hello world")
        .expect("reference tokenization of \"Hello world\"");
    let expected: Vec<u64> = serde_json::from_value(hello["ids"].clone()).unwrap();
    assert!(
        ids.ends_with(&expected),
        "ids {ids:?} do not end with llama.cpp's {expected:?}"
    );
    let direct = ok(
        "--tokenize on the command line",
        run(
            Path::new(llamafile_bin()),
            &[
                "-m",
                model.to_str().unwrap(),
                "--tokenize",
                "-p",
                "Hello world",
            ],
        ),
    );
    assert_eq!(out, direct);
}

/// One ZIP entry written by hand, for archives zipalign would refuse to make.
struct RawEntry<'a> {
    name: &'a str,
    data: &'a [u8],
    method: u16,
    uncompressed_size: u32,
    /// Bytes of padding before the local header, to place the data where a test wants it.
    pad: usize,
}

/// Appends a plain (non-ZIP64) ZIP with `entries` to `exe`; offsets count from the file start.
fn append_zip(exe: &Path, entries: &[RawEntry]) {
    let mut bytes = fs::read(exe).unwrap();
    let mut central = Vec::new();
    for e in entries {
        bytes.resize(bytes.len() + e.pad, 0);
        let offset = bytes.len() as u32;
        let crc = llamafile::bundle::crc32::crc32(e.data);
        let common_fields = |out: &mut Vec<u8>| {
            out.extend(20u16.to_le_bytes()); // version needed
            out.extend(0u16.to_le_bytes()); // flags
            out.extend(e.method.to_le_bytes());
            out.extend(0u16.to_le_bytes()); // time
            out.extend(0x21u16.to_le_bytes()); // date: 1980-01-01
            out.extend(crc.to_le_bytes());
            out.extend((e.data.len() as u32).to_le_bytes());
            out.extend(e.uncompressed_size.to_le_bytes());
            out.extend((e.name.len() as u16).to_le_bytes());
            out.extend(0u16.to_le_bytes()); // extra length
        };
        bytes.extend(b"PK\x03\x04");
        common_fields(&mut bytes);
        bytes.extend(e.name.as_bytes());
        bytes.extend(e.data);
        central.extend(b"PK\x01\x02");
        central.extend(20u16.to_le_bytes()); // version made by
        common_fields(&mut central);
        central.extend([0u8; 6]); // comment length, disk, internal attributes
        central.extend(0u32.to_le_bytes()); // external attributes
        central.extend(offset.to_le_bytes());
        central.extend(e.name.as_bytes());
    }
    let cd_offset = bytes.len() as u32;
    bytes.extend(&central);
    bytes.extend(b"PK\x05\x06");
    bytes.extend([0u8; 4]); // disk numbers
    bytes.extend((entries.len() as u16).to_le_bytes());
    bytes.extend((entries.len() as u16).to_le_bytes());
    bytes.extend((central.len() as u32).to_le_bytes());
    bytes.extend(cd_offset.to_le_bytes());
    bytes.extend(0u16.to_le_bytes()); // comment length
    fs::write(exe, bytes).unwrap();
}

/// A copy of the binary with a hand-made ZIP holding `entry`.
fn with_raw_entry(dir: &Path, name: &str, entry: RawEntry) -> PathBuf {
    let exe = dir.join(name);
    fs::copy(llamafile_bin(), &exe).unwrap();
    append_zip(&exe, &[entry]);
    exe
}

fn fake_gguf() -> Vec<u8> {
    let mut data = b"GGUF\x03\0\0\0".to_vec();
    data.resize(4096, 0x5a);
    data
}

#[test]
fn compressed_entry_is_one_clear_error() {
    let dir = scratch("bad-compressed");
    let gguf = fake_gguf();
    let header_end = fs::metadata(llamafile_bin()).unwrap().len() as usize + 30 + 6;
    let exe = with_raw_entry(
        &dir,
        "compressed",
        RawEntry {
            name: "m.gguf",
            data: &gguf[..1000],
            method: 8,
            uncompressed_size: gguf.len() as u32,
            pad: (4096 - header_end % 4096) % 4096,
        },
    );
    let out = run(&exe, &["-p", "hi"]);
    assert_one_clear_error("compressed", &out, "is compressed (method 8)");
    assert!(stderr_of(&out).contains("zipalign"), "no advice to repack");
}

#[test]
fn misaligned_entry_is_one_clear_error() {
    let dir = scratch("bad-misaligned");
    let gguf = fake_gguf();
    let header_end = fs::metadata(llamafile_bin()).unwrap().len() as usize + 30 + 6;
    // Data at 4 past a multiple of 32: GGUF tensors could not be read in place.
    let pad = (32 + 4 - header_end % 32) % 32;
    let exe = with_raw_entry(
        &dir,
        "misaligned",
        RawEntry {
            name: "m.gguf",
            data: &gguf,
            method: 0,
            uncompressed_size: gguf.len() as u32,
            pad,
        },
    );
    let out = run(&exe, &["-p", "hi"]);
    assert_one_clear_error("misaligned", &out, "not a multiple of 32");
    assert!(stderr_of(&out).contains("zipalign"), "no advice to repack");
}

#[test]
fn missing_entry_is_one_clear_error() {
    let dir = scratch("bad-missing");
    let exe = packed_binary(&dir, "missing", &[("m.gguf", &fake_gguf())]);
    let out = run(&exe, &["-m", "/zip/nope.gguf", "-p", "hi"]);
    assert_one_clear_error("missing entry", &out, "\"/zip/nope.gguf\"");
    assert!(
        stderr_of(&out).contains("no such entry"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn truncated_zip_is_one_clear_error() {
    let dir = scratch("bad-truncated");
    let gguf = fake_gguf();
    let exe = packed_binary(&dir, "whole", &[("m.gguf", &gguf), (".args", b"-n 1")]);
    let bytes = fs::read(&exe).unwrap();
    let binary_len = fs::metadata(llamafile_bin()).unwrap().len() as usize;

    // A download cut off inside the weights, opened with -m: no end record is left.
    let cut = dir.join("cut.llamafile");
    fs::write(&cut, &bytes[..binary_len + 1000]).unwrap();
    let out = run(
        Path::new(llamafile_bin()),
        &["-m", cut.to_str().unwrap(), "-p", "hi"],
    );
    assert_one_clear_error("cut short, via -m", &out, "truncated?");

    // Bytes lost from the middle: the end record is there, its offsets point past the data.
    let holed = dir.join("holed.llamafile");
    let hole_at = binary_len + 100;
    let mut holed_bytes = bytes[..hole_at].to_vec();
    holed_bytes.extend(&bytes[hole_at + 2048..]);
    fs::write(&holed, holed_bytes).unwrap();
    fs::set_permissions(&holed, fs::metadata(&exe).unwrap().permissions()).unwrap();
    let out = run(&holed, &["-p", "hi"]);
    assert_one_clear_error("bytes missing, run directly", &out, "holed.llamafile");
}

#[test]
fn unterminated_quote_in_args_is_one_clear_error() {
    let dir = scratch("bad-quote");
    let exe = packed_binary(
        &dir,
        "quote",
        &[(".args", b"-m m.gguf\n-p 'The capital\n-n 4\n")],
    );
    let out = run(&exe, &["-n", "1"]);
    assert_one_clear_error(
        "unterminated quote",
        &out,
        ".args:2:4: unterminated single quote",
    );
}

#[test]
fn make_llamafile_fails_clearly_and_leaves_nothing_behind() {
    let dir = scratch("script-errors");
    let out_file = dir.join("x.llamafile");
    let cases: [(&[&dyn AsRef<std::ffi::OsStr>], &str); 3] = [
        (&[&dir.join("absent.gguf"), &out_file], "no such file"),
        (&[&llamafile_bin(), &out_file], "not a GGUF file"),
        (&[&dir.join("only-one-arg.gguf")], "usage:"),
    ];
    for (args, expected) in cases {
        let out = make_llamafile(args);
        let err = stderr_of(&out);
        assert!(!out.status.success(), "{expected}: succeeded");
        assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
        assert!(
            err.starts_with("make-llamafile: ") && err.contains(expected),
            "expected {expected:?}: {err:?}"
        );
        assert!(!out_file.exists() && !dir.join("x.llamafile.tmp").exists());
    }
    // A zipalign failure (an alignment it refuses) leaves neither OUT nor OUT.tmp.
    let gguf = dir.join("m.gguf");
    fs::write(&gguf, fake_gguf()).unwrap();
    let out =
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/make-llamafile.sh"))
            .arg(&gguf)
            .arg(&out_file)
            .env("LLAMAFILE_BIN", llamafile_bin())
            .env("ZIPALIGN_BIN", zipalign_bin())
            .env("ZIPALIGN_ALIGN", "3")
            .output()
            .unwrap();
    assert!(!out.status.success(), "alignment 3 accepted");
    assert!(
        stderr_of(&out).contains("zipalign failed"),
        "{}",
        stderr_of(&out)
    );
    assert!(!out_file.exists() && !dir.join("x.llamafile.tmp").exists());
}

#[test]
fn packaging_twice_gives_the_same_bytes() {
    let dir = scratch("script-reproducible");
    let gguf = dir.join("m.gguf");
    fs::write(&gguf, fake_gguf()).unwrap();
    for sub in ["a", "b"] {
        fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let (a, b) = (dir.join("a/one.llamafile"), dir.join("b/two.llamafile"));
    ok("pack a", make_llamafile(&[&gguf, &a, &"--temp", &"0"]));
    // Another name, another second, another umask: nothing of it may show in the bytes.
    std::thread::sleep(Duration::from_millis(1100));
    let out = make_llamafile_umask(&[&gguf, &b, &"--temp", &"0"], &[], "077");
    ok("pack b", out);
    let (x, y) = (fs::read(&a).unwrap(), fs::read(&b).unwrap());
    assert!(
        x == y,
        "two packings differ ({} and {} bytes)",
        x.len(),
        y.len()
    );
    // And the bytes are those of the binary followed by a ZIP: the binary is not rewritten.
    assert!(x.starts_with(&fs::read(llamafile_bin()).unwrap()));
}

#[test]
fn make_llamafile_writes_one_output_per_target_by_the_naming_rule() {
    let dir = scratch("script-targets");
    let gguf = dir.join("m.gguf");
    fs::write(&gguf, fake_gguf()).unwrap();
    // The script copies whatever engine it is given; the Linux binary stands in for the
    // Windows one here (test-windows.sh packs and runs the real one).
    let windows = [("LLAMAFILE_BIN_WINDOWS_X86_64", llamafile_bin())];
    let entries = |p: &Path| -> Vec<String> {
        let b = Bundle::open(p).unwrap().unwrap();
        b.entries().iter().map(|e| e.name.clone()).collect()
    };

    let out = dir.join("both.llamafile");
    let run = make_llamafile_with(
        &[
            &gguf,
            &out,
            &"--target",
            &"linux-x86_64,windows-x86_64",
            &"-n",
            &"4",
        ],
        &windows,
    );
    ok("two targets", run);
    let linux = dir.join("both-linux-x86_64.llamafile");
    let exe = dir.join("both-windows-x86_64.exe");
    assert!(!out.exists(), "with several targets OUT is a stem only");
    assert_eq!(entries(&linux), ["m.gguf", ".args"]);
    assert_eq!(entries(&exe), ["m.gguf", ".args"]);
    let args = Bundle::open(&exe)
        .unwrap()
        .unwrap()
        .read_small(".args")
        .unwrap();
    let args = llamafile::args::parse_args_file(&String::from_utf8(args).unwrap()).unwrap();
    assert_eq!(
        args.args,
        ["-m", "m.gguf", "-n", "4"],
        "--target is not an extra argument"
    );

    // One Windows target: OUT, with .exe appended; `--` ends the script's own options.
    let single = dir.join("single");
    let run = make_llamafile_with(
        &[
            &gguf,
            &single,
            &"--target=windows-x86_64",
            &"--",
            &"--side-gguf",
        ],
        &windows,
    );
    ok("one windows target", run);
    let args = Bundle::open(&dir.join("single.exe"))
        .unwrap()
        .unwrap()
        .read_small(".args");
    assert!(String::from_utf8(args.unwrap())
        .unwrap()
        .contains("--side-gguf"));

    // Side-file mode (forced by the environment as by --side-gguf): the executable holds only
    // .args, the GGUF lies beside it under its own name.
    fs::create_dir_all(dir.join("side")).unwrap();
    let side_out = dir.join("side/s.llamafile");
    let run = make_llamafile_with(&[&gguf, &side_out], &[("LLAMAFILE_SIDE_GGUF", "1")]);
    ok("side file", run);
    assert_eq!(entries(&side_out), [".args"]);
    assert_eq!(fs::read(dir.join("side/m.gguf")).unwrap(), fake_gguf());

    for (args, expected) in [
        (
            vec!["--target", "macos-arm64"],
            "--target macos-arm64: unknown target",
        ),
        (vec!["--target", "linux-x86_64,linux-x86_64"], "given twice"),
        (vec!["--target"], "--target needs a value"),
    ] {
        let mut argv: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&gguf, &out];
        argv.extend(args.iter().map(|a| a as &dyn AsRef<std::ffi::OsStr>));
        let run = make_llamafile(&argv);
        let err = stderr_of(&run);
        assert!(!run.status.success(), "{expected}: succeeded");
        assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
        assert!(
            err.starts_with("make-llamafile: ") && err.contains(expected),
            "expected {expected:?}: {err:?}"
        );
    }
}

#[test]
fn a_llamafile_with_its_weights_beside_it_runs_from_anywhere() {
    let Some(model) = common::model_path(SMOLLM2) else {
        return;
    };
    let dir = scratch("side-gguf");
    let (bin, cwd) = (dir.join("bin"), dir.join("cwd"));
    fs::create_dir_all(&bin).unwrap();
    fs::create_dir_all(&cwd).unwrap();
    let exe = bin.join("smollm2.llamafile");
    ok(
        "make-llamafile.sh --side-gguf",
        make_llamafile(&[&model, &exe, &"--side-gguf", &"--temp", &"0"]),
    );
    let side = bin.join(model.file_name().unwrap());
    assert_eq!(
        fs::metadata(&side).unwrap().len(),
        fs::metadata(&model).unwrap().len()
    );
    let run = Command::new(&exe)
        .current_dir(&cwd)
        .args(["-p", FRANCE, "-n", "8"])
        .output()
        .unwrap();
    assert_eq!(
        ok("side-file llamafile", run),
        reference_continuation(&model, FRANCE, 8)
    );
    // Parted from its weights: one line naming where it looked.
    fs::rename(&side, dir.join("moved.gguf")).unwrap();
    let run = Command::new(&exe)
        .current_dir(&cwd)
        .args(["-p", FRANCE])
        .output()
        .unwrap();
    assert_one_clear_error("parted from its weights", &run, "not beside the program in");
}

#[test]
fn make_llamafile_quotes_extra_args() {
    let dir = scratch("script-quoting");
    let gguf = dir.join("m.gguf");
    fs::write(&gguf, fake_gguf()).unwrap();
    let out_file = dir.join("q.llamafile");
    let extra = ["--temp", "0", "-p", "it's two words", "...", ""];
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&gguf, &out_file];
    args.extend(extra.iter().map(|a| a as &dyn AsRef<std::ffi::OsStr>));
    ok("make-llamafile.sh", make_llamafile(&args));
    let bundle = Bundle::open(&out_file).unwrap().unwrap();
    let text = String::from_utf8(bundle.read_small(".args").unwrap()).unwrap();
    let parsed = llamafile::args::parse_args_file(&text).unwrap();
    let mut expected = vec!["-m", "m.gguf"];
    expected.extend(extra);
    assert_eq!(parsed.args, expected, ".args was:\n{text}");
    assert_eq!(parsed.user_slot, Some(expected.len()));
    assert_eq!(bundle.locate("m.gguf").unwrap().offset % 65536, 0);
}

#[test]
fn release_binary_needs_only_the_c_library() {
    // The libc family only: Rust's unwinder is linked statically (see README, "Linking").
    const ALLOWED: [&str; 6] = [
        "libc.so.6",
        "libm.so.6",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "ld-linux-x86-64.so.2",
    ];
    if !have_tool("readelf", "binutils") {
        return;
    }
    for bin in [llamafile_bin(), zipalign_bin()] {
        let out = ok(
            "readelf -d",
            Command::new("readelf").args(["-d", bin]).output().unwrap(),
        );
        let needed: Vec<&str> = out
            .lines()
            .filter(|l| l.contains("(NEEDED)"))
            .filter_map(|l| l.split('[').nth(1)?.split(']').next())
            .collect();
        assert!(
            needed.contains(&"libc.so.6"),
            "{bin}: not linked to glibc? {needed:?}"
        );
        let foreign: Vec<&&str> = needed.iter().filter(|n| !ALLOWED.contains(n)).collect();
        assert!(foreign.is_empty(), "{bin} needs {foreign:?}");
        eprintln!("{bin}: NEEDED {needed:?}");
    }
}

#[test]
fn runs_on_a_cpu_without_avx_under_qemu() {
    let Some((exe, model)) = smollm2_llamafile() else {
        return;
    };
    if !have_tool("qemu-x86_64", "qemu-user") {
        return;
    }
    let started = Instant::now();
    let out = Command::new("qemu-x86_64")
        .args(["-cpu", "Westmere"])
        .arg(exe)
        .args([
            "-p",
            FRANCE,
            "-n",
            "4",
            "--temp",
            "0",
            "-c",
            "256",
            "--verbose",
        ])
        .output()
        .unwrap();
    eprintln!("4 tokens under qemu Westmere in {:?}", started.elapsed());
    let err = stderr_of(&out);
    let text = ok("qemu-x86_64 -cpu Westmere", out);
    assert!(
        err.contains("cpu kernels: scalar"),
        "expected the scalar kernels without AVX: {err}"
    );
    assert_eq!(text, reference_continuation(model, FRANCE, 4));
}

#[test]
fn runs_with_networking_cut_off() {
    let Some((exe, model)) = smollm2_llamafile() else {
        return;
    };
    if !have_tool("unshare", "util-linux") {
        return;
    }
    // Only the loopback device exists in a fresh network namespace.
    let probe = Command::new("unshare")
        .args(["-n", "cat", "/proc/net/dev"])
        .output()
        .unwrap();
    if !probe.status.success() {
        assert!(!strict(), "unshare -n failed: {}", stderr_of(&probe).trim());
        eprintln!("skipping: unshare -n failed ({})", stderr_of(&probe).trim());
        return;
    }
    let devices: Vec<String> = stdout_of(&probe)
        .lines()
        .skip(2)
        .filter_map(|l| Some(l.split(':').next()?.trim().to_string()))
        .collect();
    assert_eq!(devices, ["lo"], "network namespace not empty");
    let out = Command::new("unshare")
        .arg("-n")
        .arg(exe)
        .args(["-p", FRANCE, "-n", "8", "--temp", "0"])
        .output()
        .unwrap();
    assert_eq!(
        ok("unshare -n", out),
        reference_continuation(model, FRANCE, 8)
    );
}
