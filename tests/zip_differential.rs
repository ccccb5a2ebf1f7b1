//! Our ZIP reader (`llamafile::bundle::directory`) against the `zip` crate as an oracle: on
//! archives zipalign writes (executable prefixes, alignments, nested and non-ASCII names, empty
//! files, rewrites, hundreds of entries), both must list the same entries with the same names,
//! sizes, CRCs, methods, modes, header and data offsets, and the data zip reads (checking the
//! CRC) must be the bytes at our offset. Then thousands of seeded mutations of one archive's
//! records: our reader must never panic, and where both accept a mutant they must agree. The
//! two refuse different mutants, by design: ours refuses entry data or a central directory that
//! runs past the records after it, zip refuses nonzero disk numbers and ZIP64 records that
//! disagree with the classic end record (which ours does not consult once ZIP64 is found).

mod zip_support;

use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use llamafile::bundle::directory::{read_directory, Entry};
use zip::ZipArchive;
use zip_support::*;

/// What a reader says about one entry; equal between the two readers.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    name: String,
    method: u16,
    crc32: u32,
    compressed_size: u64,
    size: u64,
    mode: u32,
    header_start: u64,
    data_start: u64,
}

fn ours(path: &Path) -> Result<Vec<Seen>, String> {
    let file = File::open(path).unwrap();
    let dir = read_directory(&file)
        .map_err(|e| e.to_string())?
        .ok_or("no ZIP")?;
    Ok(dir.entries.iter().map(seen_ours).collect())
}

fn seen_ours(e: &Entry) -> Seen {
    Seen {
        name: e.name.clone(),
        method: e.method,
        crc32: e.crc32,
        compressed_size: e.compressed_size,
        size: e.uncompressed_size,
        mode: e.external_attributes >> 16,
        header_start: e.local_header_offset,
        data_start: e.data_offset,
    }
}

/// The zip crate's view, each entry's raw data read through it as well.
fn theirs(path: &Path) -> Result<Vec<(Seen, Vec<u8>)>, String> {
    let mut archive = ZipArchive::new(File::open(path).unwrap()).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for i in 0..archive.len() {
        let mut f = archive.by_index_raw(i).map_err(|e| e.to_string())?;
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut data).map_err(|e| e.to_string())?;
        let seen = Seen {
            // Ours takes names as UTF-8 (lossily), whatever the flags; zip may read CP437.
            name: String::from_utf8_lossy(f.name_raw()).into_owned(),
            method: compression_id(f.compression()),
            crc32: f.crc32(),
            compressed_size: f.compressed_size(),
            size: f.size(),
            mode: f.external_attributes() >> 16,
            header_start: f.header_start(),
            data_start: f.data_start().ok_or("no data start")?,
        };
        out.push((seen, data));
    }
    Ok(out)
}

fn compression_id(m: zip::CompressionMethod) -> u16 {
    #[allow(deprecated)]
    match m {
        zip::CompressionMethod::Stored => 0,
        zip::CompressionMethod::Unsupported(id) => id,
        other => panic!("unexpected method {other:?}"),
    }
}

/// Both readers agree on `path`, and each entry's data is what zip reads (CRC checked by
/// reading stored entries through the decompressing reader too).
fn assert_agree(path: &Path) {
    let ours = ours(path).unwrap_or_else(|e| panic!("{}: ours: {e}", path.display()));
    let theirs = theirs(path).unwrap_or_else(|e| panic!("{}: zip: {e}", path.display()));
    assert_eq!(ours.len(), theirs.len(), "{}", path.display());
    let file = File::open(path).unwrap();
    for (o, (t, data)) in ours.iter().zip(&theirs) {
        assert_eq!(o, t, "{}", path.display());
        let mut at_ours = vec![0u8; o.compressed_size as usize];
        file.read_exact_at(&mut at_ours, o.data_start).unwrap();
        assert!(
            at_ours == *data,
            "{}: {} data differs",
            path.display(),
            o.name
        );
    }
    let mut archive = ZipArchive::new(File::open(path).unwrap()).unwrap();
    for i in 0..archive.len() {
        let mut f = archive.by_index(i).unwrap();
        std::io::copy(&mut f, &mut std::io::sink())
            .unwrap_or_else(|e| panic!("{}: entry {i}: {e}", path.display()));
    }
}

/// Writes `files` (name, bytes) under `dir` and returns their paths.
fn write_files(dir: &Path, files: &[(&str, Vec<u8>)]) -> Vec<PathBuf> {
    files
        .iter()
        .map(|(name, bytes)| {
            let p = dir.join(name);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(&p, bytes).unwrap();
            p
        })
        .collect()
}

fn zipalign_in(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_zipalign"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "zipalign {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The archives of this test, each written by zipalign.
fn archives(dir: &Path) -> Vec<PathBuf> {
    write_files(
        dir,
        &[
            ("model.gguf", noise(200_000, 1)),
            ("empty.bin", Vec::new()),
            (".args", b"-m\nmodel.gguf\n...\n".to_vec()),
            ("sub/dir/données ü.txt", "non-ASCII name\n".into()),
            ("zeros.bin", vec![0; 300_000]),
        ],
    );
    let mut out = Vec::new();
    let exe = dir.join("prog.llamafile");
    fs::copy("/bin/true", &exe).unwrap();
    zipalign_in(
        dir,
        &["-j", "prog.llamafile", "model.gguf", ".args", "empty.bin"],
    );
    out.push(exe);
    for align in ["1", "4096"] {
        let name = format!("plain-{align}.zip");
        zipalign_in(
            dir,
            &[
                "-a",
                align,
                &name,
                "model.gguf",
                "sub/dir/données ü.txt",
                "zeros.bin",
                "empty.bin",
            ],
        );
        out.push(dir.join(name));
    }
    // A rewrite: entries kept, one replaced, one added.
    let rewritten = dir.join("rewritten.zip");
    fs::copy(dir.join("plain-1.zip"), &rewritten).unwrap();
    fs::write(dir.join("model.gguf"), noise(70_000, 2)).unwrap();
    zipalign_in(dir, &["-N", "rewritten.zip", "model.gguf", ".args"]);
    out.push(rewritten);
    // Hundreds of entries.
    let names: Vec<String> = (0..300).map(|i| format!("many/{i:03}.txt")).collect();
    for (i, n) in names.iter().enumerate() {
        write_files(dir, &[(n, noise(i * 7, i as u64))]);
    }
    let mut args = vec!["-a", "1", "many.zip"];
    args.extend(names.iter().map(String::as_str));
    zipalign_in(dir, &args);
    out.push(dir.join("many.zip"));
    out
}

#[test]
fn our_reader_agrees_with_the_zip_crate_on_what_zipalign_writes() {
    let dir = scratch("differential");
    for archive in archives(&dir) {
        assert_agree(&archive);
    }
}

#[test]
fn mutated_archives_never_panic_and_agree_when_both_accept() {
    let dir = scratch("differential-mutants");
    let files = write_files(
        &dir,
        &[
            ("a.bin", noise(3000, 3)),
            ("b.txt", b"hello\n".to_vec()),
            ("c", Vec::new()),
        ],
    );
    let zip = dir.join("base.zip");
    let mut args: Vec<&str> = vec!["-a", "64", "base.zip"];
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    args.extend(names.iter().map(String::as_str));
    zipalign_in(&dir, &args);
    let base = fs::read(&zip).unwrap();
    // Mutate the records (local headers and everything after the last entry's data), not the
    // entries' data, which neither reader interprets.
    let records: Vec<usize> = {
        let first = ours(&zip).unwrap();
        let data_end = first
            .iter()
            .map(|e| e.data_start + e.compressed_size)
            .max()
            .unwrap();
        let mut at: Vec<usize> = (data_end as usize..base.len()).collect();
        for e in &first {
            at.extend(e.header_start as usize..e.data_start as usize);
        }
        at
    };
    let mutant = dir.join("mutant.zip");
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut both, mut only_ours, mut only_theirs) = (0, 0, 0);
    for round in 0..3000 {
        let mut bytes = base.clone();
        for _ in 0..1 + next() % 3 {
            let at = records[(next() % records.len() as u64) as usize];
            bytes[at] = match next() % 3 {
                0 => bytes[at] ^ (1 << (next() % 8)),
                1 => 0xff,
                _ => next() as u8,
            };
        }
        if next() % 10 == 0 {
            bytes.truncate(bytes.len() - 1 - (next() % 64) as usize);
        }
        fs::write(&mutant, &bytes).unwrap();
        let o = ours(&mutant);
        let t = theirs(&mutant);
        match (&o, &t) {
            (Ok(o), Ok(t)) => {
                both += 1;
                let t: Vec<&Seen> = t.iter().map(|(s, _)| s).collect();
                assert_eq!(
                    o.iter().collect::<Vec<_>>(),
                    t,
                    "round {round}: readers disagree"
                );
            }
            (Ok(_), Err(_)) => only_ours += 1,
            (Err(_), Ok(_)) => only_theirs += 1,
            (Err(_), Err(_)) => {}
        }
    }
    eprintln!("3000 mutants: both read {both}, only ours {only_ours}, only zip {only_theirs}");
    // The agreement check means something only if many mutants are read by both (896 of the
    // 3000 with this seed): a mutation scheme that broke every archive would test nothing.
    assert!(
        both >= 300,
        "only {both} of 3000 mutants were read by both readers"
    );
}
