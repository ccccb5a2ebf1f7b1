//! zipalign as a program: output checked by our reader, by parsing local headers directly, by
//! Python's zipfile and by `unzip -t`; replacement, reproducibility, files over 4 GiB, packed
//! executables that still run, one-line errors that leave the archive untouched, and `kill -9`
//! at random points of a rewrite leaving the original whole.

mod zip_support;

use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use llamafile::bundle::crc32::crc32;
use llamafile::bundle::Bundle;
use zip_support::*;

/// Every entry's data starts at a multiple of `alignment`, seen by our reader and by reading
/// each local header at the offset Python reports.
fn assert_aligned(zip: &Path, alignment: u64) {
    let bundle = Bundle::open(zip).unwrap().expect("a ZIP");
    for entry in bundle.entries() {
        assert_eq!(
            entry.data_offset % alignment,
            0,
            "{} (our reader)",
            entry.name
        );
    }
    if let Some(entries) = python_entries(zip) {
        assert_eq!(entries.len(), bundle.entries().len());
        for py in entries {
            let data = data_offset_from_local_header(zip, py.header_offset);
            assert_eq!(data % alignment, 0, "{} (local header)", py.name);
            assert_eq!(data, bundle.entry(&py.name).unwrap().data_offset);
        }
    }
}

#[test]
fn packed_executable_still_runs_and_passes_zip_checks() {
    let dir = scratch("runs");
    let exe = dir.join("true.llamafile");
    fs::copy("/bin/true", &exe).unwrap();
    let weights = dir.join("sub").join("weights.gguf");
    fs::create_dir_all(weights.parent().unwrap()).unwrap();
    let data = noise(300_000, 1);
    fs::write(&weights, &data).unwrap();
    let args_file = dir.join(".args");
    fs::write(&args_file, "-m\nweights.gguf\n...\n").unwrap();

    zipalign_ok(&[&"-j", &exe, &weights, &args_file]);

    let status = Command::new(&exe).status().unwrap();
    assert!(status.success(), "packed executable no longer runs");
    assert_eq!(
        fs::metadata(&exe).unwrap().mode() & 0o777,
        fs::metadata("/bin/true").unwrap().mode() & 0o777
    );
    unzip_test(&exe);
    assert_aligned(&exe, 65536);
    // The executable's own bytes are untouched.
    let original = fs::read("/bin/true").unwrap();
    assert_eq!(&fs::read(&exe).unwrap()[..original.len()], &original[..]);

    if let Some(entries) = python_entries(&exe) {
        let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["weights.gguf", ".args"]);
        assert_eq!(entries[0].size, data.len() as u64);
        assert_eq!(entries[0].compressed_size, data.len() as u64);
        assert_eq!(entries[0].crc, crc32(&data));
        assert_eq!(entries[0].method, 0, "stored");
        assert_eq!(entries[1].size, 20);
    }
}

#[test]
fn keeps_directories_without_j_and_honours_alignment() {
    let dir = scratch("paths");
    let zip = dir.join("out.zip");
    let nested = dir.join("a").join("b.bin");
    fs::create_dir_all(nested.parent().unwrap()).unwrap();
    fs::write(&nested, noise(5000, 2)).unwrap();
    let other = dir.join("c.bin");
    fs::write(&other, noise(77, 3)).unwrap();
    // Relative paths are stored as given; the ZIP is created because it does not exist.
    let out = Command::new(env!("CARGO_BIN_EXE_zipalign"))
        .current_dir(&dir)
        .args(["-a", "4096", "out.zip", "./a/b.bin", "c.bin"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bundle = Bundle::open(&zip).unwrap().unwrap();
    let names: Vec<_> = bundle.entries().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["a/b.bin", "c.bin"]);
    assert_aligned(&zip, 4096);
    assert!(bundle.entries().iter().any(|e| e.data_offset % 65536 != 0));
    unzip_test(&zip);
}

#[test]
fn replacing_an_entry_drops_the_old_data() {
    let dir = scratch("replace");
    let exe = dir.join("prog");
    fs::copy("/bin/true", &exe).unwrap();
    let model = dir.join("model.gguf");
    let keep = dir.join("keep.txt");
    fs::write(&model, noise(200_000, 4)).unwrap();
    fs::write(&keep, b"kept as is\n").unwrap();
    zipalign_ok(&[&"-j", &exe, &model, &keep]);
    let before = fs::metadata(&exe).unwrap().len();

    let new_model = noise(150_000, 5);
    fs::write(&model, &new_model).unwrap();
    zipalign_ok(&[&"-j", &exe, &model]);

    let after = fs::metadata(&exe).unwrap().len();
    assert!(after <= before, "old data kept: {before} -> {after}");
    let bundle = Bundle::open(&exe).unwrap().unwrap();
    let names: Vec<_> = bundle.entries().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["keep.txt", "model.gguf"]);
    assert_eq!(bundle.read_small("keep.txt").unwrap(), b"kept as is\n");
    let loc = bundle.locate("model.gguf").unwrap();
    let mut stored = vec![0u8; loc.len as usize];
    fs::File::open(&exe)
        .unwrap()
        .read_exact_at(&mut stored, loc.offset)
        .unwrap();
    assert_eq!(stored, new_model);
    assert_aligned(&exe, 65536);
    unzip_test(&exe);
    assert!(Command::new(&exe).status().unwrap().success());
}

#[test]
fn adds_to_a_zip_written_by_another_tool() {
    let dir = scratch("foreign");
    let zip = dir.join("foreign.zip");
    let text = dir.join("text.txt");
    fs::write(&text, "compress me ".repeat(1000)).unwrap();
    let raw = dir.join("raw.bin");
    fs::write(&raw, noise(1000, 6)).unwrap();
    if python_zip(
        &zip,
        &[("deflated.txt", &text, true), ("stored.bin", &raw, false)],
    )
    .is_none()
    {
        return;
    }
    let added = dir.join("added.bin");
    fs::write(&added, noise(3000, 7)).unwrap();
    zipalign_ok(&[&"-j", &zip, &added]);
    let entries = python_entries(&zip).unwrap();
    let summary: Vec<_> = entries
        .iter()
        .map(|e| (e.name.as_str(), e.method))
        .collect();
    assert_eq!(
        summary,
        [("deflated.txt", 8), ("stored.bin", 0), ("added.bin", 0)]
    );
    assert_aligned(&zip, 65536);
    unzip_test(&zip);
}

#[test]
fn output_is_reproducible_unless_n() {
    let dir = scratch("reproducible");
    let input = dir.join("in.bin");
    fs::write(&input, noise(10_000, 8)).unwrap();
    let day = SystemTime::UNIX_EPOCH + Duration::from_secs(1_600_000_000); // 2020-09-13 12:26:40 UTC
    fs::File::options()
        .write(true)
        .open(&input)
        .unwrap()
        .set_modified(day)
        .unwrap();
    let (one, two, stamped) = (dir.join("one"), dir.join("two"), dir.join("stamped"));
    zipalign_ok(&[&"-j", &one, &input]);
    std::thread::sleep(Duration::from_millis(1100));
    zipalign_ok(&[&"-j", &two, &input]);
    assert_eq!(fs::read(&one).unwrap(), fs::read(&two).unwrap());
    zipalign_ok(&[&"-jN", &stamped, &input]);
    assert_ne!(fs::read(&one).unwrap(), fs::read(&stamped).unwrap());
    if let Some(entries) = python_entries(&stamped) {
        assert_eq!(entries[0].date_time, "2020-9-13-12-26-40");
    }
    if let Some(entries) = python_entries(&one) {
        assert_eq!(entries[0].date_time, "2023-11-14-22-13-20");
    }
}

#[test]
fn file_over_4_gib_gets_zip64_sizes() {
    let dir = scratch("huge");
    let big = dir.join("big.gguf");
    let len: u64 = (4 << 30) + 12345;
    let file = fs::File::create(&big).unwrap();
    file.set_len(len).unwrap(); // sparse: zeros cost no disk
    file.write_all_at(b"GGUF head", 0).unwrap();
    file.write_all_at(b"tail bytes", len - 10).unwrap();
    drop(file);
    let zip = dir.join("big.llamafile");
    fs::copy("/bin/true", &zip).unwrap();

    zipalign_ok(&[&"-j", &zip, &big]);

    let bundle = Bundle::open(&zip).unwrap().unwrap();
    let entry = bundle.entry("big.gguf").unwrap();
    assert_eq!(entry.uncompressed_size, len);
    assert_eq!(entry.compressed_size, len);
    assert_eq!(entry.data_offset % 65536, 0);
    let out = fs::File::open(&zip).unwrap();
    let mut tail = [0u8; 10];
    out.read_exact_at(&mut tail, entry.data_offset + len - 10)
        .unwrap();
    assert_eq!(&tail, b"tail bytes");
    // Zero blocks were left as holes rather than written out.
    assert!(out.metadata().unwrap().blocks() * 512 < 1 << 30);
    // Python reads all 4 GiB to check the CRC.
    if let Some(entries) = python_entries(&zip) {
        assert_eq!(entries[0].size, len);
        assert_eq!(entries[0].crc, entry.crc32);
    }
    assert!(Command::new(&zip).status().unwrap().success());
    let _ = fs::remove_dir_all(&dir);
}

fn stderr_line(out: &std::process::Output) -> String {
    let text = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(text.lines().count(), 1, "one line expected: {text:?}");
    text
}

#[test]
fn errors_are_one_line_and_leave_the_archive_untouched() {
    let dir = scratch("errors");
    let zip = dir.join("prog");
    fs::copy("/bin/true", &zip).unwrap();
    let present = dir.join("present.bin");
    fs::write(&present, b"x").unwrap();
    zipalign_ok(&[&zip, &present]);
    let original = fs::read(&zip).unwrap();
    let dir_listing = || {
        let mut names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let listing = dir_listing();

    let missing = dir.join("missing.gguf");
    let out = zipalign(&[&zip, &present, &missing]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr_line(&out).contains("missing.gguf"));

    let out = zipalign(&[&"-a", &"1000", &zip, &present]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_line(&out).contains("power of two"));

    let out = zipalign(&[&"-j", &zip, &present, &dir.join("x").join("present.bin")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr_line(&out).contains("more than once"));

    let out = zipalign(&[&zip, &dir]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr_line(&out).contains("not a regular file"));

    let out = zipalign(&[&dir, &present]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr_line(&out).contains("not a regular file"));

    assert_eq!(fs::read(&zip).unwrap(), original);
    assert_eq!(dir_listing(), listing, "a temporary file was left behind");

    // An unreadable ZIP: its central directory signature is destroyed.
    let bundle = Bundle::open(&zip).unwrap().unwrap();
    let cd_offset = bundle.entries()[0].data_offset + 1; // present.bin is one byte long
    let cd_offset = (cd_offset..original.len() as u64)
        .find(|&i| original[i as usize..].starts_with(b"PK\x01\x02"))
        .unwrap();
    let mut corrupt = original.clone();
    corrupt[cd_offset as usize + 1] = b'X';
    fs::write(&zip, &corrupt).unwrap();
    let out = zipalign(&[&zip, &present]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr_line(&out).contains("corrupt ZIP"));
    assert_eq!(fs::read(&zip).unwrap(), corrupt);
    assert_eq!(dir_listing(), listing);

    let out = zipalign(&[&"-h"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("usage: zipalign"));
}

/// Names in `dir` other than `known`, sorted.
fn other_names(dir: &Path, known: &[&str]) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !known.contains(&n.as_str()))
        .collect();
    names.sort();
    names
}

#[test]
fn kill_9_at_random_points_leaves_the_original_whole() {
    let dir = scratch("kill");
    let exe = dir.join("prog");
    fs::copy("/bin/true", &exe).unwrap();
    // Real-size data on both sides: a rewrite copies the old entry, then streams the new one.
    let old_weights = dir.join("old.gguf");
    fs::write(&old_weights, noise(24 << 20, 9)).unwrap();
    zipalign_ok(&[&"-j", &exe, &old_weights]);
    let new_weights = dir.join("new.gguf");
    fs::write(&new_weights, noise(24 << 20, 10)).unwrap();
    let original = fs::read(&exe).unwrap();

    // The finished rewrite, for runs that complete before the kill; output is reproducible.
    let finished_path = dir.join("finished");
    fs::copy(&exe, &finished_path).unwrap();
    let start = Instant::now();
    zipalign_ok(&[&"-j", &finished_path, &new_weights]);
    let full_run = start.elapsed();
    let finished = fs::read(&finished_path).unwrap();
    fs::remove_file(&finished_path).unwrap();
    assert_ne!(finished, original);

    let known = ["prog", "old.gguf", "new.gguf"];
    let mut seed = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        | 1;
    let mut interrupted = 0;
    for trial in 0..8 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // Anywhere from start-up to a little past a whole run.
        let delay = full_run.mul_f64((seed % 1000) as f64 / 900.0);
        let mut child = Command::new(env!("CARGO_BIN_EXE_zipalign"))
            .args([&"-j" as &dyn AsRef<std::ffi::OsStr>, &exe, &new_weights].map(|a| a.as_ref()))
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        let now = fs::read(&exe).unwrap();
        // A kill after the rename (while syncing the directory or exiting) finds the new one.
        if now == finished {
            fs::write(&exe, &original).unwrap();
        } else {
            assert!(
                now == original,
                "trial {trial}: killed after {delay:?}, the archive is neither old nor new"
            );
            assert!(!status.success(), "trial {trial}: finished but unchanged");
            interrupted += 1;
        }
        // Whatever a killed run leaves is a hidden temporary file, never the archive's name.
        for name in other_names(&dir, &known) {
            assert!(
                name.starts_with(".prog.zipalign-") && name.ends_with(".tmp"),
                "trial {trial}: unexpected file {name}"
            );
        }
    }
    eprintln!("{interrupted} of 8 runs killed before finishing (a full run takes {full_run:?})");
    assert!(interrupted > 0, "no kill landed inside a run");
    let _ = fs::remove_dir_all(&dir);
}
