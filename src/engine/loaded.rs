//! A model opened for running: its weights mapped in place and its tokenizer, from a GGUF file,
//! a llamafile, or an entry of our own executable's ZIP. The engine's entry point for every
//! front end (CLI modes, chat, bench, server, draft models).

use super::PlacedModel;
use crate::bundle::{resolve_model, Bundle};
use crate::gguf::GgufFile;
use crate::tokenizer::Tokenizer;
use anyhow::{Context, Result};
use std::sync::Arc;

/// A model with its tokenizer.
pub struct Loaded {
    pub model: PlacedModel,
    pub tokenizer: Tokenizer,
}

/// Opens the model named `name` (a GGUF file, a llamafile, or an entry of our own ZIP `own`),
/// mapping its weights in place.
pub fn load_model(name: &str, own: Option<&Bundle>) -> Result<Loaded> {
    load_model_from(name, own, false)
}

/// [`load_model`], or with `in_memory` (`--no-mmap`) the weights read into memory of the
/// process's own (huge pages where the system has them) instead of mapped.
pub fn load_model_from(name: &str, own: Option<&Bundle>, in_memory: bool) -> Result<Loaded> {
    let loc = resolve_model(name, own)?;
    let file = if in_memory {
        GgufFile::read_range(&loc.path, loc.offset, loc.len)
    } else {
        GgufFile::open_range(&loc.path, loc.offset, loc.len)
    }
    .with_context(|| format!("cannot load {name}"))?;
    let file = Arc::new(file);
    let model = PlacedModel::load(file.clone()).with_context(|| format!("cannot load {name}"))?;
    let tokenizer = Tokenizer::from_gguf(&file)
        .with_context(|| format!("cannot load the tokenizer of {name}"))?;
    Ok(Loaded { model, tokenizer })
}
