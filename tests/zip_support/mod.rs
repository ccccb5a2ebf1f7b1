//! Helpers shared by tests/zipalign.rs and tests/bundle.rs: scratch directories, running
//! zipalign, and independent checks with Python's `zipfile` and Info-ZIP's `unzip`.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A fresh, empty directory for one test.
pub fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("zip-tests")
        .join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn zipalign(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zipalign"))
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .expect("run zipalign")
}

/// Runs zipalign and fails the test, with its stderr, unless it succeeds.
pub fn zipalign_ok(args: &[&dyn AsRef<std::ffi::OsStr>]) {
    let out = zipalign(args);
    assert!(
        out.status.success(),
        "zipalign failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Deterministic pseudo-random bytes.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

pub fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("-h")
        .output()
        .map(|o| o.status.success() || !o.stdout.is_empty())
        .unwrap_or(false)
}

/// Runs a Python snippet with `args` in `sys.argv[1:]`; `None` (with a note) without python3.
pub fn python(script: &str, args: &[&Path]) -> Option<String> {
    if !have("python3") {
        eprintln!("note: python3 not found; skipping the zipfile cross-check");
        return None;
    }
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

/// One entry as Python's `zipfile` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyEntry {
    pub name: String,
    pub size: u64,
    pub compressed_size: u64,
    pub crc: u32,
    pub header_offset: u64,
    pub method: u16,
    pub date_time: String,
}

/// Python's `zipfile` listing of `zip`, after `testzip()` (which reads every entry and checks
/// its CRC) reported no bad entry.
pub fn python_entries(zip: &Path) -> Option<Vec<PyEntry>> {
    let script = r#"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    bad = z.testzip()
    assert bad is None, f"bad entry {bad}"
    for i in z.infolist():
        d = "-".join(str(x) for x in i.date_time)
        print(f"{i.filename}\t{i.file_size}\t{i.compress_size}\t{i.CRC}\t{i.header_offset}\t{i.compress_type}\t{d}")
"#;
    let text = python(script, &[zip])?;
    Some(
        text.lines()
            .map(|line| {
                let f: Vec<&str> = line.split('\t').collect();
                PyEntry {
                    name: f[0].to_string(),
                    size: f[1].parse().unwrap(),
                    compressed_size: f[2].parse().unwrap(),
                    crc: f[3].parse().unwrap(),
                    header_offset: f[4].parse().unwrap(),
                    method: f[5].parse().unwrap(),
                    date_time: f[6].to_string(),
                }
            })
            .collect(),
    )
}

/// `unzip -t` must report no error (exit 0, which also rules out warnings).
pub fn unzip_test(zip: &Path) {
    if !have("unzip") {
        eprintln!("note: unzip not found (apt-get install unzip); skipping unzip -t");
        return;
    }
    let out = Command::new("unzip").arg("-t").arg(zip).output().unwrap();
    assert!(
        out.status.success(),
        "unzip -t {}: {}{}",
        zip.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Data offset of the entry whose local header is at `offset`, read straight from the file
/// bytes (independent of the library's reader).
pub fn data_offset_from_local_header(zip: &Path, offset: u64) -> u64 {
    use std::os::unix::fs::FileExt;
    let file = fs::File::open(zip).unwrap();
    let mut header = [0u8; 30];
    file.read_exact_at(&mut header, offset).unwrap();
    assert_eq!(
        &header[..4],
        b"PK\x03\x04",
        "local header signature at {offset}"
    );
    let name_len = u16::from_le_bytes([header[26], header[27]]) as u64;
    let extra_len = u16::from_le_bytes([header[28], header[29]]) as u64;
    offset + 30 + name_len + extra_len
}

/// Builds a ZIP with Python's `zipfile`: each `(name, contents, deflate)`.
pub fn python_zip(zip: &Path, entries: &[(&str, &Path, bool)]) -> Option<()> {
    let script = r#"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w") as z:
    args = sys.argv[2:]
    for name, src, deflate in zip(args[0::3], args[1::3], args[2::3]):
        method = zipfile.ZIP_DEFLATED if deflate == "1" else zipfile.ZIP_STORED
        z.write(src, arcname=name, compress_type=method)
"#;
    let mut args: Vec<PathBuf> = vec![zip.to_path_buf()];
    for (name, src, deflate) in entries {
        args.push(PathBuf::from(name));
        args.push(src.to_path_buf());
        args.push(PathBuf::from(if *deflate { "1" } else { "0" }));
    }
    let refs: Vec<&Path> = args.iter().map(|p| p.as_path()).collect();
    python(script, &refs).map(|_| ())
}
