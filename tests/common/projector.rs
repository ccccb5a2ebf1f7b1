//! The synthetic projectors the image tests read (`tools/synth-model.py --mmproj`), checked
//! against the SHA-256 that tests/data/vision's llama.cpp references were made from, and
//! pictures as PNG bytes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use llamafile::gguf::GgufFile;
use llamafile::vision::{Projector, RgbImage};

/// tests/data/vision: llama.cpp's reference embeddings and their index.
pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vision")
}

/// The synthetic projector `family` with weights `ty`, written into a directory of its own for
/// `tag` and loaded; its SHA-256 must be `index.json`'s `sha_key` entry `sha_name`. `None`
/// (skip) when python cannot write it, unless the models are required.
pub fn synth_projector(
    family: &str,
    ty: &str,
    tag: &str,
    sha_key: &str,
    sha_name: &str,
) -> Option<Projector> {
    let dir = std::env::temp_dir().join(format!(
        "llamafile-projector-{family}-{ty}-{tag}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mmproj.gguf");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/synth-model.py");
    let out = Command::new("python3")
        .arg(script)
        .args(["--mmproj", family, ty])
        .arg(&path)
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        other => {
            let why = format!(
                "tools/synth-model.py --mmproj failed (pip install gguf numpy?): {other:?}"
            );
            if std::env::var("LLAMAFILE_REQUIRE_MODELS").as_deref() == Ok("1") {
                panic!("{why}");
            }
            eprintln!("skipping: {why}");
            return None;
        }
    }
    let sha = Command::new("sha256sum").arg(&path).output().unwrap();
    let sha = String::from_utf8_lossy(&sha.stdout);
    let index: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data_dir().join("index.json")).unwrap())
            .unwrap();
    assert_eq!(
        sha.split_whitespace().next(),
        index[sha_key][sha_name].as_str(),
        "the synthetic projector differs from the one the references were made from"
    );
    let proj = Projector::load(Arc::new(GgufFile::open(&path).unwrap())).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    Some(proj)
}

/// The one record of reference file `name` in tests/data/vision: (n_tokens, n_embd, values).
pub fn record(name: &str) -> (usize, usize, Vec<f32>) {
    let bytes = std::fs::read(data_dir().join(name)).unwrap();
    let n_tokens = i32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    let n_embd = i32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    assert_eq!(bytes.len(), 8 + n_tokens * n_embd * 4, "{name}: one record");
    let values = bytes[8..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (n_tokens, n_embd, values)
}

/// Max |ours − theirs| relative to the largest magnitude of `theirs`.
pub fn worst_relative(ours: &[f32], theirs: &[f32]) -> f32 {
    assert_eq!(ours.len(), theirs.len());
    let scale = theirs.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = ours
        .iter()
        .zip(theirs)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    diff / scale
}

/// The tolerance of embeddings from `ty` weights against llama.cpp's (tests/vision_llama_cpp.rs
/// explains them: f16 activations round apart and sum in other orders; a Q8_0 activation block
/// may round a value on a boundary either way).
pub fn tolerance(ty: &str) -> f32 {
    if ty == "f16" {
        1e-3
    } else {
        2e-2
    }
}

/// The picture as a PNG file's bytes.
pub fn png(img: &RgbImage) -> Vec<u8> {
    use image::ImageEncoder;
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(
            &img.data,
            img.width as u32,
            img.height as u32,
            image::ExtendedColorType::Rgb8,
        )
        .unwrap();
    out
}
