//! The synthetic projectors the image tests read (`tools/synth-model.py --mmproj`), checked
//! against the SHA-256 that tests/data/vision's llama.cpp references were made from, and
//! pictures as PNG bytes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use llamafile::gguf::GgufFile;
use llamafile::vision::{decode, preprocess_tiles, Projector, RgbImage};

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

/// Every record of reference file `name` in tests/data/vision, one per encoded input (the tiles,
/// then the overview, of a tiled image): (n_tokens, n_embd, values).
pub fn records(name: &str) -> Vec<(usize, usize, Vec<f32>)> {
    let bytes = std::fs::read(data_dir().join(name)).unwrap();
    let mut out = Vec::new();
    let mut rest = &bytes[..];
    while !rest.is_empty() {
        let n_tokens = i32::from_le_bytes(rest[0..4].try_into().unwrap()) as usize;
        let n_embd = i32::from_le_bytes(rest[4..8].try_into().unwrap()) as usize;
        let len = 8 + n_tokens * n_embd * 4;
        let values = rest[8..len]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        out.push((n_tokens, n_embd, values));
        rest = &rest[len..];
    }
    out
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

/// The synthetic projector `family` with `ty` weights (SHA-256 in `siglip_mmproj_sha256`) on
/// the test picture of `w`×`h`, for the projectors whose tokens form a grid (Qwen2-VL's and
/// Qwen2.5-VL's): one input of `grid` tokens, counted before encoding, whose embeddings are
/// within [`tolerance`] of llama.cpp's record `FAMILY-TY-WxH.emb`.
pub fn compare_grid(family: &str, ty: &str, w: usize, h: usize, grid: (usize, usize)) {
    let name = format!("{family}-{ty}");
    let tag = format!("{w}x{h}");
    let Some(proj) = synth_projector(family, ty, &tag, "siglip_mmproj_sha256", &name) else {
        return;
    };
    let img = decode(&png(&super::picture::picture(w, h))).unwrap();
    let tiles = preprocess_tiles(&img, proj.ty, &proj.hparams);
    assert_eq!(tiles.images.len(), 1, "one input");
    let input = &tiles.images[0];
    assert_eq!(proj.token_grid(input), Some(grid), "{tag}: token grid");
    let (n_tokens, n_embd, want) = record(&format!("{name}-{tag}.emb"));
    assert_eq!((n_tokens, n_embd), (grid.0 * grid.1, proj.n_embd_out()));
    assert_eq!(proj.n_tokens_for(w, h), n_tokens, "counted before encoding");
    let worst = worst_relative(&proj.encode(input), &want);
    eprintln!("{name} {tag}: max |ours - llama.cpp| / max |llama.cpp| = {worst:.2e}");
    assert!(worst < tolerance(ty), "{name} {tag}: {worst}");
}

/// What Qwen2-VL's and Qwen2.5-VL's synthetic projectors share: 2×2 merging into the text
/// model's 256, 8 to 4096 tokens an image (clip's limits), M-RoPE positions, and
/// `<|vision_start|>` rows `<|vision_end|>`.
pub fn check_qwen_budget_and_layout(p: &Projector) {
    assert_eq!((p.hparams.n_merge, p.n_embd_out()), (2, 256));
    assert!(p.ty.mrope());
    assert!(p.n_tokens_for(10, 10) >= 8);
    assert!(p.n_tokens_for(8000, 8000) <= 4096);
    assert_eq!(p.layout().begin, "<|vision_start|>");
    assert_eq!(p.layout().end, "<|vision_end|>");
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

/// Runs tools/synth-model.py with `args`, writing `out`; panics if it fails.
pub fn synth(args: &[&str], out: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/synth-model.py");
    let st = Command::new("python3")
        .arg(script)
        .args(args)
        .arg(out)
        .status()
        .expect("python3");
    assert!(st.success(), "tools/synth-model.py {args:?}");
}
