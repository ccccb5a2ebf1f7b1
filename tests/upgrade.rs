//! `llamafile --upgrade-engine OLD OUT`: a llamafile's weights and `.args` moved onto this
//! engine, copied as stored (the GGUF bytes equal to the old ones), runnable, and a refusal in
//! one line when this engine cannot run the model.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use llamafile::bundle::pack::DEFAULT_ALIGNMENT as ALIGNMENT;
use llamafile::bundle::{crc32, Bundle};
use llamafile::gguf::{GgufWriter, Value};
use llamafile::upgrade::upgrade;

const FRANCE: &str = "The capital of France is";

fn llamafile_bin() -> &'static str {
    env!("CARGO_BIN_EXE_llamafile")
}

fn zipalign_bin() -> &'static str {
    env!("CARGO_BIN_EXE_zipalign")
}

fn scratch(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("upgrade-tests")
        .join(test);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// A "llamafile" whose engine is `engine`'s bytes, with `files` packed by zipalign.
fn packed(dir: &Path, name: &str, engine: &str, files: &[&Path]) -> PathBuf {
    let exe = dir.join(name);
    fs::copy(engine, &exe).unwrap();
    let out = Command::new(zipalign_bin())
        .arg("-j")
        .arg(&exe)
        .args(files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn upgrade_cmd(old: &Path, out: &Path) -> Output {
    Command::new(llamafile_bin())
        .arg("--upgrade-engine")
        .arg(old)
        .arg(out)
        .output()
        .unwrap()
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Checks that entry `name` holds the same bytes in `a` and `b` (compared in 1 MiB pieces) and
/// is 64 KiB-aligned in `b`; returns the bytes' CRC-32 and length.
fn same_entry_bytes(a: &Path, b: &Path, name: &str) -> (u32, u64) {
    let (ba, bb) = (
        Bundle::open(a).unwrap().unwrap(),
        Bundle::open(b).unwrap().unwrap(),
    );
    let (la, lb) = (ba.locate(name).unwrap(), bb.locate(name).unwrap());
    assert_eq!(la.len, lb.len, "{name}: lengths differ");
    let (fa, fb) = (fs::File::open(a).unwrap(), fs::File::open(b).unwrap());
    let mut crc = crc32::Crc32::new();
    let (mut xa, mut xb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut done = 0;
    while done < la.len {
        let n = (la.len - done).min(1 << 20) as usize;
        llamafile::platform::read_exact_at(&fa, &mut xa[..n], la.offset + done).unwrap();
        llamafile::platform::read_exact_at(&fb, &mut xb[..n], lb.offset + done).unwrap();
        assert!(
            xa[..n] == xb[..n],
            "{name}: bytes differ near offset {done}"
        );
        crc.update(&xa[..n]);
        done += n as u64;
    }
    assert_eq!(
        lb.offset % ALIGNMENT,
        0,
        "{name}: data not aligned in {}",
        b.display()
    );
    (crc.finish(), la.len)
}

#[test]
fn upgraded_llamafile_carries_the_same_weights_and_runs() {
    let Some(model) = common::model_path("SmolLM2-135M-Instruct.Q4_1") else {
        return;
    };
    let dir = scratch("carry");
    let args = dir.join(".args");
    let name = model.file_name().unwrap().to_str().unwrap();
    fs::write(&args, format!("-m\n{name}\n--temp\n0\n...\n")).unwrap();
    // The old engine: any other executable (zipalign here); only its entries matter.
    let old = packed(&dir, "old.llamafile", zipalign_bin(), &[&model, &args]);
    let out = dir.join("new.llamafile");
    let run = upgrade_cmd(&old, &out);
    assert!(run.status.success(), "{}", stderr_of(&run));
    assert!(stderr_of(&run).contains("wrote"), "{}", stderr_of(&run));

    let new_bytes_start = fs::read(llamafile_bin()).unwrap();
    let head = {
        use std::io::Read;
        let mut h = vec![0u8; new_bytes_start.len()];
        fs::File::open(&out).unwrap().read_exact(&mut h).unwrap();
        h
    };
    assert!(
        head == new_bytes_start,
        "the result does not start with this engine"
    );
    let entries: Vec<String> = Bundle::open(&out)
        .unwrap()
        .unwrap()
        .entries()
        .iter()
        .map(|e| e.name.clone())
        .collect();
    assert_eq!(entries, [name, ".args"]);
    let (crc, len) = same_entry_bytes(&old, &out, name);
    assert_eq!(len, fs::metadata(&model).unwrap().len());
    assert_eq!(
        crc,
        crc32::crc32(&fs::read(&model).unwrap()),
        "GGUF bytes changed"
    );
    same_entry_bytes(&old, &out, ".args");

    // It runs, with the old .args (greedy), exactly as the engine runs the model directly.
    let got = Command::new(&out)
        .args(["-p", FRANCE, "-n", "6"])
        .output()
        .unwrap();
    let want = Command::new(llamafile_bin())
        .args([
            "-m",
            model.to_str().unwrap(),
            "--temp",
            "0",
            "-p",
            FRANCE,
            "-n",
            "6",
        ])
        .output()
        .unwrap();
    assert!(got.status.success(), "{}", stderr_of(&got));
    assert_eq!(got.stdout, want.stdout);

    // An engine that is itself a llamafile gives only its executable part, not its entries.
    let stale = dir.join("stale.txt");
    fs::write(&stale, "the new engine's own entry").unwrap();
    let engine = packed(&dir, "engine", llamafile_bin(), &[&stale]);
    let via_packed = dir.join("via-packed.llamafile");
    let done = upgrade(&engine, &old, &via_packed).unwrap();
    assert_eq!(done.entries, [name, ".args"]);
    // Its part is everything before its ZIP: the binary and zipalign's zero padding.
    let bytes = fs::read(&via_packed).unwrap();
    let (exe, padding) = bytes[..done.engine_len as usize].split_at(new_bytes_start.len());
    assert!(exe == new_bytes_start && padding.iter().all(|&b| b == 0));
    same_entry_bytes(&old, &via_packed, name);

    // In place: OUT may be OLD itself.
    let run = upgrade_cmd(&old, &old);
    assert!(run.status.success(), "{}", stderr_of(&run));
    assert_eq!(fs::read(&old).unwrap(), fs::read(&out).unwrap());
}

/// A GGUF with just enough metadata to name its architecture.
fn tiny_gguf(arch: &str) -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", Value::from(arch));
    w
}

#[test]
fn refusals_are_one_line_and_write_nothing() {
    let dir = scratch("refusals");
    let unknown = dir.join("future.gguf");
    tiny_gguf("mamba9").write_file(&unknown).unwrap();
    let old_unknown = packed(&dir, "unknown.llamafile", "/bin/true", &[&unknown]);
    let text = dir.join("notes.txt");
    fs::write(&text, "no weights here").unwrap();
    let old_empty = packed(&dir, "empty.llamafile", "/bin/true", &[&text]);
    let out = dir.join("out.llamafile");
    let cases: [(&Path, &str); 3] = [
        (&old_unknown, "this engine cannot run future.gguf"),
        (&old_empty, "holds no .gguf entry"),
        (Path::new("/bin/true"), "not a llamafile"),
    ];
    for (old, expected) in cases {
        let run = upgrade_cmd(old, &out);
        common::assert_one_line_error(&run, expected);
        let err = stderr_of(&run);
        assert!(
            err.starts_with("llamafile: error: --upgrade-engine: "),
            "{err:?}"
        );
        assert!(!out.exists(), "{expected}: wrote {}", out.display());
    }
    let unknown_arch = stderr_of(&upgrade_cmd(&old_unknown, &out));
    assert!(
        unknown_arch.contains("unknown architecture 'mamba9'"),
        "{unknown_arch}"
    );
    assert!(!fs::read_dir(&dir).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .contains(".tmp")));
}
