//! The library side of a llamafile: finding entries in a packed executable, resolving `-m`,
//! `.args` expansion from the ZIP, and a clear one-line typed error for every bad input.

mod zip_support;

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use llamafile::args::{self, ArgsError};
use llamafile::bundle::{
    resolve_model, resolve_model_beside, Bundle, BundleError, ModelLocation, ZipError,
};
use zip_support::*;

/// A fake GGUF: the magic, then noise.
fn gguf_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut data = noise(len, seed);
    data[..4].copy_from_slice(b"GGUF");
    data
}

/// Copies /bin/true to `dir/name` and packs `files` (written first) into it with `-j`.
fn packed(dir: &Path, name: &str, files: &[(&str, &[u8])]) -> PathBuf {
    let exe = dir.join(name);
    fs::copy("/bin/true", &exe).unwrap();
    let inputs: Vec<PathBuf> = files
        .iter()
        .map(|(file, bytes)| {
            let path = dir.join("inputs").join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, bytes).unwrap();
            path
        })
        .collect();
    let mut argv: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"-j", &exe];
    argv.extend(inputs.iter().map(|p| p as &dyn AsRef<std::ffi::OsStr>));
    zipalign_ok(&argv);
    exe
}

fn read_range(loc: &ModelLocation) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mut data = vec![0u8; loc.len as usize];
    fs::File::open(&loc.path)
        .unwrap()
        .read_exact_at(&mut data, loc.offset)
        .unwrap();
    data
}

fn one_line(err: &impl std::fmt::Display) -> String {
    let text = err.to_string();
    assert!(!text.contains('\n'), "multi-line error: {text:?}");
    text
}

#[test]
fn lists_entries_of_a_packed_executable() {
    let dir = scratch("bundle-list");
    let model = gguf_bytes(100_000, 1);
    let exe = packed(
        &dir,
        "prog",
        &[
            ("m.gguf", &model),
            (".args", b"-m m.gguf"),
            ("notes.txt", b"hi"),
        ],
    );
    let bundle = Bundle::open(&exe).unwrap().expect("has a ZIP");
    assert_eq!(bundle.path(), exe);
    assert_eq!(bundle.entries().len(), 3);
    assert_eq!(bundle.entry("/zip/m.gguf"), bundle.entry("m.gguf"));
    assert!(bundle.entry("m.ggu").is_none());
    let ggufs: Vec<_> = bundle.gguf_entries().map(|e| e.name.as_str()).collect();
    assert_eq!(ggufs, ["m.gguf"]);
    assert_eq!(bundle.read_small("/zip/.args").unwrap(), b"-m m.gguf");
    let loc = bundle.locate("m.gguf").unwrap();
    assert_eq!(loc.offset % 65536, 0);
    assert_eq!(read_range(&loc), model);

    // A plain executable has no ZIP; nor does an empty file.
    assert!(Bundle::open(Path::new("/bin/true")).unwrap().is_none());
    let empty = dir.join("empty");
    fs::write(&empty, b"").unwrap();
    assert!(Bundle::open(&empty).unwrap().is_none());
}

#[test]
fn resolves_models_on_disk_then_in_our_zip() {
    let dir = scratch("bundle-resolve");
    let model = gguf_bytes(50_000, 2);
    let own = packed(&dir, "own", &[("inside.gguf", &model)]);
    let own = Bundle::open(&own).unwrap().unwrap();

    // A plain GGUF on disk: the whole file.
    let plain = dir.join("plain.gguf");
    fs::write(&plain, &model).unwrap();
    let loc = resolve_model(plain.to_str().unwrap(), Some(&own)).unwrap();
    assert_eq!(
        (loc.path.as_path(), loc.offset, loc.len),
        (plain.as_path(), 0, 50_000)
    );

    // Our own entry, by NAME and by /zip/NAME.
    for name in ["inside.gguf", "/zip/inside.gguf"] {
        let loc = resolve_model(name, Some(&own)).unwrap();
        assert_eq!(loc.path, own.path());
        assert_eq!(read_range(&loc), model);
    }

    // Another llamafile holding exactly one .gguf (next to other entries).
    let other = packed(
        &dir,
        "other.llamafile",
        &[(".args", b"-v"), ("x.gguf", &model)],
    );
    let loc = resolve_model(other.to_str().unwrap(), None).unwrap();
    assert_eq!(loc.path, other);
    assert_eq!(loc.offset % 65536, 0);
    assert_eq!(read_range(&loc), model);

    // A file on disk wins over an entry of the same name.
    let shadow = dir.join("inside.gguf");
    fs::write(&shadow, &model).unwrap();
    let loc = resolve_model(shadow.to_str().unwrap(), Some(&own)).unwrap();
    assert_eq!(loc.offset, 0);
}

#[test]
fn a_relative_name_found_nowhere_else_is_a_side_file_beside_the_program() {
    let dir = scratch("bundle-side-file");
    let model = gguf_bytes(40_000, 9);
    // The program holds only .args; its weights lie beside it, in `dir/bin`.
    fs::create_dir_all(dir.join("bin/sub")).unwrap();
    let own = packed(&dir.join("bin"), "prog", &[(".args", b"-m side.gguf")]);
    let own = Bundle::open(&own).unwrap().unwrap();
    let bin = dir.join("bin");
    fs::write(bin.join("side.gguf"), &model).unwrap();
    fs::write(bin.join("sub/deeper.gguf"), &model).unwrap();

    // The tests run from the crate's directory, which holds neither name.
    for name in ["side.gguf", "sub/deeper.gguf", "./side.gguf"] {
        let loc = resolve_model_beside(name, Some(&own), Some(&bin)).unwrap();
        assert_eq!(loc.path, bin.join(name), "{name}");
        assert_eq!((loc.offset, read_range(&loc)), (0, model.clone()));
    }
    // The same through resolve_model, which takes the program's directory from `own`.
    assert_eq!(
        resolve_model("side.gguf", Some(&own)).unwrap().path,
        bin.join("side.gguf")
    );

    // An entry of our own ZIP comes before a side file of the same name.
    let both = packed(&bin, "both", &[("side.gguf", &gguf_bytes(30_000, 10))]);
    let both = Bundle::open(&both).unwrap().unwrap();
    let loc = resolve_model("side.gguf", Some(&both)).unwrap();
    assert_eq!((loc.path.as_path(), loc.len), (both.path(), 30_000));

    // Absolute names and /zip/ names are never looked up beside the program, and their
    // errors do not claim they were.
    let elsewhere = dir.join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    let absolute = elsewhere.join("side.gguf");
    for name in [absolute.to_str().unwrap(), "/zip/side.gguf"] {
        let err = resolve_model_beside(name, Some(&own), Some(&bin)).unwrap_err();
        assert!(
            matches!(&err, BundleError::ModelNotFound { beside: None, .. }),
            "{name}: {err}"
        );
        assert!(!one_line(&err).contains("beside"), "{err}");
    }

    // Not found anywhere: the one line names every place looked at.
    let err = resolve_model_beside("absent.gguf", Some(&own), Some(&bin)).unwrap_err();
    let text = one_line(&err);
    assert!(
        text.contains("no such entry in")
            && text.contains(&format!("not beside the program in {}", bin.display())),
        "{text}"
    );
    let err = resolve_model_beside("absent.gguf", None, None).unwrap_err();
    assert!(!one_line(&err).contains("beside"), "{err}");
}

#[test]
fn resolve_errors_are_typed_and_one_line() {
    let dir = scratch("bundle-resolve-errors");
    let own = packed(&dir, "own", &[("a.gguf", &gguf_bytes(100, 3))]);
    let own = Bundle::open(&own).unwrap().unwrap();

    let err = resolve_model("nope.gguf", Some(&own)).unwrap_err();
    assert!(matches!(err, BundleError::ModelNotFound { .. }), "{err:?}");
    assert!(one_line(&err).contains("no such entry in"));
    let err = resolve_model("/zip/a.gguf", None).unwrap_err();
    assert!(one_line(&err).contains("holds no ZIP"), "{err}");

    let two = packed(
        &dir,
        "two.llamafile",
        &[
            ("a.gguf", &gguf_bytes(100, 4)),
            ("b.gguf", &gguf_bytes(100, 5)),
        ],
    );
    let err = resolve_model(two.to_str().unwrap(), None).unwrap_err();
    assert!(matches!(err, BundleError::SeveralGgufInside { ref names, .. } if names.len() == 2));
    one_line(&err);

    let none = packed(&dir, "none.llamafile", &[("readme.txt", b"no model")]);
    let err = resolve_model(none.to_str().unwrap(), None).unwrap_err();
    assert!(matches!(err, BundleError::NoGgufInside { .. }), "{err:?}");

    let text = dir.join("text.txt");
    fs::write(&text, "just some text, not a model").unwrap();
    let err = resolve_model(text.to_str().unwrap(), None).unwrap_err();
    assert!(matches!(err, BundleError::NotAModel { .. }), "{err:?}");
    one_line(&err);
}

#[test]
fn compressed_entry_is_refused_with_advice() {
    let dir = scratch("bundle-compressed");
    let src = dir.join("src.gguf");
    fs::write(&src, b"GGUF".repeat(5000)).unwrap();
    let zip = dir.join("deflated.llamafile");
    if python_zip(&zip, &[("m.gguf", &src, true)]).is_none() {
        return;
    }
    let err = resolve_model(zip.to_str().unwrap(), None).unwrap_err();
    assert!(
        matches!(err, BundleError::Compressed { method: 8, .. }),
        "{err:?}"
    );
    assert!(one_line(&err).contains("zipalign"));
    let bundle = Bundle::open(&zip).unwrap().unwrap();
    assert!(matches!(
        bundle.read_small("m.gguf"),
        Err(BundleError::Compressed { .. })
    ));
}

#[test]
fn misaligned_entry_is_refused_with_advice() {
    let dir = scratch("bundle-misaligned");
    let src = dir.join("src.gguf");
    fs::write(&src, gguf_bytes(1000, 6)).unwrap();
    let zip = dir.join("stored.zip");
    // Python stores data right after a 30 + 6 byte local header: offset 36.
    if python_zip(&zip, &[("m.gguf", &src, false)]).is_none() {
        return;
    }
    let bundle = Bundle::open(&zip).unwrap().unwrap();
    assert_eq!(bundle.entry("m.gguf").unwrap().data_offset, 36);
    let err = bundle.locate("m.gguf").unwrap_err();
    assert!(
        matches!(err, BundleError::Misaligned { offset: 36, .. }),
        "{err:?}"
    );
    let text = one_line(&err);
    assert!(text.contains("zipalign") && text.contains("36"), "{text}");
}

#[test]
fn missing_entry_is_a_typed_error() {
    let dir = scratch("bundle-missing");
    let exe = packed(&dir, "prog", &[("a.gguf", &gguf_bytes(64, 7))]);
    let bundle = Bundle::open(&exe).unwrap().unwrap();
    for err in [
        bundle.locate("b.gguf").unwrap_err(),
        bundle.read_small(".args").unwrap_err(),
    ] {
        assert!(matches!(err, BundleError::MissingEntry { .. }), "{err:?}");
        one_line(&err);
    }
}

#[test]
fn truncated_zip_is_a_clear_error() {
    let dir = scratch("bundle-truncated");
    let exe = packed(&dir, "prog", &[("a.gguf", &gguf_bytes(70_000, 8))]);
    let whole = fs::read(&exe).unwrap();

    // Cut at the end: the end records are gone, so it is no longer a ZIP at all.
    let cut_end = dir.join("cut-end");
    fs::write(&cut_end, &whole[..whole.len() - 30]).unwrap();
    assert!(Bundle::open(&cut_end).unwrap().is_none());
    let err = resolve_model(cut_end.to_str().unwrap(), None).unwrap_err();
    assert!(one_line(&err).contains("truncated?"), "{err}");

    // Cut in the middle (part of the model lost): the end records point past what is left.
    let cut_middle = dir.join("cut-middle");
    let data = Bundle::open(&exe).unwrap().unwrap().entries()[0].data_offset as usize;
    let mut bytes = whole[..data + 1000].to_vec();
    bytes.extend_from_slice(&whole[data + 21_000..]);
    fs::write(&cut_middle, &bytes).unwrap();
    let err = Bundle::open(&cut_middle).unwrap_err();
    assert!(
        matches!(
            err,
            BundleError::Zip {
                source: ZipError::Truncated { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(one_line(&err).contains("truncated ZIP"));
}

#[test]
fn corrupted_small_entry_fails_its_crc() {
    let dir = scratch("bundle-crc");
    let exe = packed(&dir, "prog", &[(".args", b"-m a.gguf ...")]);
    let bundle = Bundle::open(&exe).unwrap().unwrap();
    let at = bundle.entry(".args").unwrap().data_offset as usize;
    let mut bytes = fs::read(&exe).unwrap();
    bytes[at] ^= 1;
    fs::write(&exe, &bytes).unwrap();
    let bundle = Bundle::open(&exe).unwrap().unwrap();
    let err = bundle.read_small(".args").unwrap_err();
    assert!(matches!(err, BundleError::BadChecksum { .. }), "{err:?}");
}

#[test]
fn zip_appended_with_relative_offsets_is_found() {
    let dir = scratch("bundle-appended");
    let src = dir.join("args");
    fs::write(&src, b"--temp 0").unwrap();
    let zip = dir.join("plain.zip");
    if python_zip(&zip, &[(".args", &src, false)]).is_none() {
        return;
    }
    // `cat prog archive.zip`: offsets inside stay relative to the archive's own start.
    let exe = dir.join("prog");
    let mut bytes = fs::read("/bin/true").unwrap();
    let prefix = bytes.len() as u64;
    bytes.extend_from_slice(&fs::read(&zip).unwrap());
    fs::write(&exe, &bytes).unwrap();
    let bundle = Bundle::open(&exe).unwrap().unwrap();
    assert_eq!(bundle.read_small(".args").unwrap(), b"--temp 0");
    assert_eq!(bundle.entry(".args").unwrap().local_header_offset, prefix);
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

#[test]
fn args_from_the_zip_are_merged_into_argv() {
    let dir = scratch("bundle-args");
    let text = b"# defaults\n--server\n-m 'my model.gguf'\n...\n--temp 0\n";
    let exe = packed(&dir, "prog", &[(".args", text)]);
    let bundle = Bundle::open(&exe).unwrap().unwrap();
    let argv = args::expand(os(&["prog", "-p", "hi"]), Some(&bundle)).unwrap();
    assert_eq!(
        argv,
        os(&[
            "prog",
            "--server",
            "-m",
            "my model.gguf",
            "-p",
            "hi",
            "--temp",
            "0"
        ])
    );

    // No .args entry: argv is left alone.
    let bare = packed(&dir, "bare", &[("a.gguf", b"GGUF")]);
    let bare = Bundle::open(&bare).unwrap().unwrap();
    assert_eq!(
        args::expand(os(&["prog", "-x"]), Some(&bare)).unwrap(),
        os(&["prog", "-x"])
    );

    // A broken .args is one clear line naming where.
    let broken = packed(
        &dir,
        "broken",
        &[(".args", b"-m a.gguf\n-p \"unfinished\n")],
    );
    let broken = Bundle::open(&broken).unwrap().unwrap();
    let err = args::expand(os(&["prog"]), Some(&broken)).unwrap_err();
    assert!(matches!(
        err,
        ArgsError::UnterminatedQuote {
            line: 2,
            column: 4,
            ..
        }
    ));
    assert_eq!(one_line(&err), ".args:2:4: unterminated double quote");
}

#[test]
fn an_executable_without_a_zip_opens_as_none() {
    // This test binary has nothing appended: no false end record in its own bytes.
    assert!(Bundle::open_self().unwrap().is_none());
    let argv = os(&["prog", "-n", "1"]);
    assert_eq!(args::expand_from_own_zip(argv.clone()).unwrap(), argv);
}
