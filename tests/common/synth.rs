//! The synthetic models of `tools/synth-model.py` (tests/families.rs, tests/moe_draft.rs):
//! generated on first use into `~/.cache/llamafile-rs/synth` (or `$LLAMAFILE_SYNTH`) and checked
//! against the SHA-256 that `tests/data/families/index.json` recorded for them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the llama.cpp references of the synthetic models live.
pub fn families_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/families")
}

/// The parsed `index.json` of [`families_dir`].
pub fn index() -> serde_json::Value {
    let text = std::fs::read_to_string(families_dir().join("index.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn required() -> bool {
    std::env::var("LLAMAFILE_REQUIRE_MODELS").as_deref() == Ok("1")
}

/// Skips (returns `None`) or, when models are required, fails with `why`.
fn unavailable<T>(why: String) -> Option<T> {
    if required() {
        panic!("{why}");
    }
    eprintln!("skipping: {why}");
    None
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum runs");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The synthetic model `family`-`ty`, generated if absent, checked against `sha`.
pub fn synth_model(family: &str, ty: &str, sha: &str) -> Option<PathBuf> {
    let dir = match std::env::var("LLAMAFILE_SYNTH") {
        Ok(d) => PathBuf::from(d),
        Err(_) => PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
            .join(".cache/llamafile-rs/synth"),
    };
    let path = dir.join(format!("{family}-{ty}.gguf"));
    if !path.exists() {
        // The synthetic models' vocabulary comes from SmolLM2.
        let vocab = super::model_path("SmolLM2-135M-Instruct.Q4_1")?;
        std::fs::create_dir_all(&dir).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/synth-model.py");
        let out = Command::new("python3")
            .arg(script)
            .args([family, ty])
            .arg(&path)
            .arg("--vocab-from")
            .arg(&vocab)
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                return unavailable(format!(
                    "tools/synth-model.py {family} {ty} failed (pip install gguf numpy?): {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ))
            }
            Err(e) => return unavailable(format!("python3 not runnable: {e}")),
        }
    }
    let got = sha256(&path);
    assert_eq!(
        got,
        sha,
        "{} differs from the model the references were made from (gguf 0.19.0 wrote it); \
         delete it to regenerate, or rerun tools/make-family-refs.sh if tools/synth-model.py \
         changed",
        path.display()
    );
    Some(path)
}

/// The synthetic model `family`-`ty` with the SHA-256 the references recorded for it.
pub fn synth_model_of(family: &str, ty: &str) -> Option<PathBuf> {
    let idx = index();
    let set = idx["sets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["family"] == family && s["type"] == ty)
        .unwrap_or_else(|| panic!("no reference set for {family}-{ty}"));
    synth_model(family, ty, set["model_sha256"].as_str().unwrap())
}
