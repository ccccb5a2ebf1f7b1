//! The synthetic pairs of the vision tests (tests/data/vision): the text model
//! (`tools/synth-model.py llava f16`, SmolLM2's vocabulary) and its Q8_0 projector
//! (`--mmproj llava q8_0`), and the same for `gemma3` and `smolvlm`, generated once into
//! `~/.cache/llamafile-rs/synth` (or `$LLAMAFILE_SYNTH`) and checked against the SHA-256
//! `index.json` records; and the test picture as a PNG.

use std::path::{Path, PathBuf};
use std::process::Command;

fn index() -> serde_json::Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vision/index.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

fn unavailable<T>(why: String) -> Option<T> {
    if std::env::var("LLAMAFILE_REQUIRE_MODELS").as_deref() == Ok("1") {
        panic!("{why}");
    }
    eprintln!("skipping: {why}");
    None
}

/// `tools/synth-model.py ARGS PATH EXTRA` unless PATH already has `sha`.
fn synth(args: &[&str], name: &str, extra: &[&str], sha: &str) -> Option<PathBuf> {
    let dir = match std::env::var("LLAMAFILE_SYNTH") {
        Ok(d) => PathBuf::from(d),
        Err(_) => PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
            .join(".cache/llamafile-rs/synth"),
    };
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    if path.exists() && sha256(&path) == sha {
        return Some(path);
    }
    // Written aside and renamed: test binaries may make it at the same time.
    let tmp = dir.join(format!("{name}.{}", std::process::id()));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/synth-model.py");
    let out = Command::new("python3")
        .arg(script)
        .args(args)
        .arg(&tmp)
        .args(extra)
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        other => return unavailable(format!("tools/synth-model.py {args:?} failed: {other:?}")),
    }
    std::fs::rename(&tmp, &path).unwrap();
    assert_eq!(
        sha256(&path),
        sha,
        "{} differs from index.json's",
        path.display()
    );
    Some(path)
}

/// The text model and the projector.
pub fn pair() -> Option<(PathBuf, PathBuf)> {
    // One test thread at a time makes them (the others wait and find them made).
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _making = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let vocab = super::model_path("SmolLM2-135M-Instruct.Q4_1")?;
    let vocab = vocab.to_str().unwrap().to_string();
    let idx = index();
    let text = synth(
        &["llava", "f16"],
        "llava-text-f16.gguf",
        &["--vocab-from", vocab.as_str()],
        idx["text_sha256"]["f16"].as_str().unwrap(),
    )?;
    let mmproj = synth(
        &["--mmproj", "llava", "q8_0"],
        "llava-mmproj-q8_0.gguf",
        &[],
        idx["mmproj_sha256"]["q8_0"].as_str().unwrap(),
    )?;
    Some((text, mmproj))
}

/// The synthetic pair of a SigLIP `family` (`gemma3`, `smolvlm`): its text model (SmolLM2's
/// vocabulary) and its Q8_0 projector, as tools/make-vision-refs.py made llama.cpp's references
/// from.
pub fn family_pair(family: &str) -> Option<(PathBuf, PathBuf)> {
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _making = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let vocab = super::model_path("SmolLM2-135M-Instruct.Q4_1")?;
    let vocab = vocab.to_str().unwrap().to_string();
    let idx = index();
    let text = synth(
        &[family, "f16"],
        &format!("{family}-text-f16.gguf"),
        &["--vocab-from", vocab.as_str()],
        idx["text_sha256"][family].as_str().unwrap(),
    )?;
    let mmproj = synth(
        &["--mmproj", family, "q8_0"],
        &format!("{family}-mmproj-q8_0.gguf"),
        &[],
        idx["siglip_mmproj_sha256"][format!("{family}-q8_0")]
            .as_str()
            .unwrap(),
    )?;
    Some((text, mmproj))
}

/// The projector `bytes` refused by the loader (its message holds `load_error`) and by the CLI
/// with text model `text` and a picture: one line naming `cli_error`, exit status 1.
pub fn refused_everywhere(text: &Path, bytes: &[u8], load_error: &str, cli_error: &str) {
    let file = llamafile::gguf::GgufFile::from_bytes(bytes.to_vec()).unwrap();
    let err = llamafile::vision::Projector::load(std::sync::Arc::new(file))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains(load_error), "{err}");
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "llamafile-bad-projector-{}-{call}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let (bad, pic) = (dir.join("bad.gguf"), dir.join("pic.png"));
    std::fs::write(&bad, bytes).unwrap();
    std::fs::write(&pic, picture_png(130, 50)).unwrap();
    let (text, bad, pic) = (
        text.to_str().unwrap(),
        bad.to_str().unwrap(),
        pic.to_str().unwrap(),
    );
    let args = ["-m", text, "--mmproj", bad, "--image", pic, "-p", "hi"];
    let out = super::llamafile(&args);
    super::assert_one_line_error(&out, cli_error);
    assert_eq!(out.status.code(), Some(1));
    std::fs::remove_dir_all(&dir).ok();
}

/// The test picture, `w`×`h`, as PNG bytes.
pub fn picture_png(w: usize, h: usize) -> Vec<u8> {
    let pic = super::picture::picture(w, h);
    let img = image::RgbImage::from_raw(w as u32, h as u32, pic.data).unwrap();
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

/// The 84×84 test picture's PNG with its header claiming 9000×10 pixels (its checksum fixed):
/// past the size limit, to be refused before decoding.
pub fn huge_png() -> Vec<u8> {
    let mut png = picture_png(84, 84);
    png[16..20].copy_from_slice(&9000u32.to_be_bytes());
    png[20..24].copy_from_slice(&10u32.to_be_bytes());
    let mut c = !0u32;
    for &b in &png[12..29] {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    png[29..33].copy_from_slice(&(!c).to_be_bytes());
    png
}

/// llama-mtmd-cli's greedy text (tests/data/vision/cli.json): `(prompt, images, text)`.
pub fn cli_cases() -> Vec<(String, usize, String)> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vision/cli.json");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["prompt"].as_str().unwrap().to_string(),
                c["images"].as_u64().unwrap() as usize,
                c["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}
