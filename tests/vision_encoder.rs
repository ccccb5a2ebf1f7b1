//! The LLaVA (`mlp`) vision encoder against a NumPy reference of llama.cpp's clip graph
//! (tests/vision_reference.py), on the synthetic projector of `tools/synth-model.py --mmproj`:
//! f16 and Q8_0 weights, an image of the input size (no resampling) and one that is resized
//! and padded; plus the projector loader's refusals.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::picture::picture;
use llamafile::gguf::GgufFile;
use llamafile::vision::{preprocess, Projector, RgbImage};

fn required() -> bool {
    std::env::var("LLAMAFILE_REQUIRE_MODELS").as_deref() == Ok("1")
}

fn tmp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("llamafile-vision-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs python3 with `args`; `None` (skip) when python or its packages are missing, unless
/// the models are required (CI).
fn python(args: &[&Path]) -> Option<()> {
    let out = Command::new("python3").args(args).output();
    let why = match out {
        Ok(o) if o.status.success() => return Some(()),
        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
        Err(e) => format!("python3 not runnable: {e}"),
    };
    if required() {
        panic!("python3 {args:?} failed: {why}");
    }
    eprintln!("skipping: python3 {args:?} failed (pip install gguf numpy?): {why}");
    None
}

fn synth_projector(dir: &Path, ty: &str) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = dir.join(format!("mmproj-{ty}.gguf"));
    let out_str = out.clone();
    let script = root.join("tools/synth-model.py");
    let (a, b, c) = (Path::new("--mmproj"), Path::new("llava"), Path::new(ty));
    python(&[&script, a, b, c, &out_str])?;
    Some(out)
}

/// Our embeddings of `img` and the reference's of the preprocessed image, both row-major.
fn both(dir: &Path, mmproj: &Path, img: &RgbImage) -> Option<(Vec<f32>, Vec<f32>, usize)> {
    let proj = Projector::load(Arc::new(GgufFile::open(mmproj).unwrap())).unwrap();
    let pre = preprocess(img, proj.ty, &proj.hparams);
    let ours = proj.encode(&pre);
    // The reference starts from the resized 8-bit image: undo the normalisation exactly enough
    // to recover the bytes (each is (v/255 - mean)/std in f32; 255 steps apart by far more than
    // the rounding).
    let hp = &proj.hparams;
    let plane = pre.width * pre.height;
    let mut rgb = vec![0u8; plane * 3];
    for (i, px) in rgb.chunks_exact_mut(3).enumerate() {
        for (c, byte) in px.iter_mut().enumerate() {
            let v = (pre.data[c * plane + i] * hp.image_std[c] + hp.image_mean[c]) * 255.0;
            *byte = v.round().clamp(0.0, 255.0) as u8;
        }
    }
    let raw = dir.join("image.rgb");
    std::fs::write(&raw, &rgb).unwrap();
    let out = dir.join("reference.f32");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vision_reference.py");
    python(&[&script, mmproj, &raw, &out])?;
    let bytes = std::fs::read(&out).unwrap();
    let reference: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    Some((ours, reference, proj.n_embd_out()))
}

/// The largest difference relative to the reference's largest magnitude.
fn rel_err(ours: &[f32], reference: &[f32]) -> f32 {
    assert_eq!(ours.len(), reference.len(), "embedding shapes differ");
    let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = ours
        .iter()
        .zip(reference)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    diff / scale
}

#[test]
fn f16_projector_matches_the_reference() {
    let dir = tmp_dir("f16");
    let Some(mmproj) = synth_projector(&dir, "f16") else {
        return;
    };
    // 84×84 is the input size: no resampling, the whole image is the input.
    let Some((ours, reference, width)) = both(&dir, &mmproj, &picture(84, 84)) else {
        return;
    };
    assert_eq!(width, 256);
    assert_eq!(
        ours.len(),
        36 * 256,
        "6×6 patches of the text model's width"
    );
    let err = rel_err(&ours, &reference);
    eprintln!("f16 projector: max |ours - reference| / max |reference| = {err:.2e}");
    assert!(err < 2e-3, "relative error {err}");
    // A different picture gives different embeddings (the comparison above is not vacuous).
    let Some((other, _, _)) = both(&dir, &mmproj, &picture(84, 60)) else {
        return;
    };
    assert!(rel_err(&other, &reference) > 0.05);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn q8_0_projector_on_a_resized_image_matches_the_reference() {
    let dir = tmp_dir("q8");
    let Some(mmproj) = synth_projector(&dir, "q8_0") else {
        return;
    };
    // Wider than tall: scaled to 84×(ceil 84·50/130 = 33) and padded with the mean colour.
    let Some((ours, reference, _)) = both(&dir, &mmproj, &picture(130, 50)) else {
        return;
    };
    let err = rel_err(&ours, &reference);
    eprintln!("q8_0 projector: max |ours - reference| / max |reference| = {err:.2e}");
    // Q8_0 activations (ggml's, and ours) against the reference's exact ones.
    assert!(err < 3e-2, "relative error {err}");
    std::fs::remove_dir_all(&dir).ok();
}
