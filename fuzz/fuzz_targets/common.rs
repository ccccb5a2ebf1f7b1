//! What several fuzz targets share: the test models they take their vocabularies (or, for
//! the server, their weights) from.

#![allow(dead_code)]

use std::path::PathBuf;

use llamafile::gguf::GgufFile;
use llamafile::tokenizer::Tokenizer;

/// Where packaging/fetch-models.sh caches the test models (`LLAMAFILE_MODELS` overrides it).
fn models_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("LLAMAFILE_MODELS") {
        return PathBuf::from(dir);
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    PathBuf::from(home).join(".cache/llamafile-rs/models")
}

/// The path of test model `stem`; the target cannot run without it, so its absence aborts
/// with the command that fetches it.
pub fn model_file(stem: &str) -> String {
    let path = models_dir().join(format!("{stem}.gguf"));
    assert!(
        path.is_file(),
        "{}: missing (run packaging/fetch-models.sh smollm2)",
        path.display()
    );
    path.to_string_lossy().into_owned()
}

/// The tokenizer of test model `stem`; the target cannot run without it, so its absence aborts
/// with the command that fetches it.
pub fn tokenizer(stem: &str) -> Tokenizer {
    let path = models_dir().join(format!("{stem}.gguf"));
    let file = GgufFile::open(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run packaging/fetch-models.sh all)",
            path.display()
        )
    });
    Tokenizer::from_gguf(&file).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Splits fuzz input into parts at 0xFF bytes (never valid UTF-8, so it never cuts a text the
/// fuzzer built on purpose), decoding each part lossily.
pub fn parts(data: &[u8]) -> Vec<String> {
    data.split(|&b| b == 0xFF)
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect()
}
