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
