//! `llamafile --upgrade-engine OLD OUT`: a llamafile with this engine and OLD's contents. The
//! running executable (the part before its own ZIP, if it has one) comes first, then every
//! entry of OLD's ZIP (the GGUF weights, `.args`, anything else) copied as stored, byte for
//! byte, re-aligned to 64 KiB, then a new central directory. The weights are read and written
//! once, streamed, never recompressed, so a new engine does not mean downloading the weights
//! again.
//!
//! The engine doing the upgrade is the one that will run the result, so it checks first that
//! it can: every GGUF in OLD must load as a model here (its architecture known, its tensors
//! the ones the forward pass reads); otherwise nothing is written and the error names the
//! entry and why. OUT is written as zipalign writes: a temporary file beside it, flushed,
//! renamed over OUT, the directory flushed, so a crash leaves the old OUT or the new one. OUT
//! may be OLD itself.
//!
//! Owns the upgrade only; reading and writing ZIPs is [`crate::bundle`]'s.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::bundle::output::Output;
use crate::bundle::pack::{
    copy_entry, copy_range, write_central_directory, CHUNK, DEFAULT_ALIGNMENT,
};
use crate::bundle::{Bundle, BundleError};
use crate::gguf::{GgufError, GgufFile};
use crate::model::{Model, ModelError};

/// Why an upgrade was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("{}: not a llamafile (no ZIP at its end)", .0.display())]
    NotALlamafile(PathBuf),
    #[error("{}: its ZIP holds no .gguf entry, so there are no weights to carry over", .0.display())]
    NoWeights(PathBuf),
    #[error("{}: {name}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        name: String,
        source: Box<GgufError>,
    },
    #[error("this engine cannot run {name} of {}: {source}", path.display())]
    CannotRun {
        path: PathBuf,
        name: String,
        source: Box<ModelError>,
    },
    #[error(transparent)]
    Bundle(Box<BundleError>),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What was written: the entries carried over and the size of the engine in front of them.
#[derive(Debug)]
pub struct Upgraded {
    pub engine_len: u64,
    pub entries: Vec<String>,
}

/// Writes OUT: `engine` (the bytes of an executable, up to its own ZIP) followed by `old`'s
/// entries, after checking that this build can run every GGUF among them.
pub fn upgrade(engine: &Path, old: &Path, out: &Path) -> Result<Upgraded, UpgradeError> {
    let source = Bundle::open(old)?.ok_or_else(|| UpgradeError::NotALlamafile(old.into()))?;
    check_runnable(&source)?;
    let engine_len = match Bundle::open(engine)? {
        Some(own) => own.archive_start(),
        None => file_len(engine)?,
    };
    let engine_file = File::open(engine).map_err(io_error(engine))?;

    let mut output = Output::create(out).map_err(io_error(out))?;
    let mut buf = vec![0u8; CHUNK];
    copy_range(&engine_file, 0, engine_len, &mut output, &mut buf).map_err(io_error(engine))?;
    let mut entries = Vec::new();
    for entry in source.entries() {
        let copied = copy_entry(
            source.file(),
            entry,
            DEFAULT_ALIGNMENT,
            &mut output,
            &mut buf,
        )
        .map_err(io_error(old))?;
        entries.push(copied);
    }
    write_central_directory(&entries, &mut output).map_err(io_error(out))?;
    let permissions = executable_permissions(engine)?;
    let entries = entries.into_iter().map(|e| e.name).collect();
    // Windows does not replace a file that is open (OUT may be OLD or the engine): close both.
    drop(source);
    drop(engine_file);
    output.commit(Some(permissions)).map_err(io_error(out))?;
    Ok(Upgraded {
        engine_len,
        entries,
    })
}

/// Every GGUF entry of `source` must load as a model in this build.
fn check_runnable(source: &Bundle) -> Result<(), UpgradeError> {
    let path = source.path().to_path_buf();
    let ggufs: Vec<_> = source.gguf_entries().collect();
    if ggufs.is_empty() {
        return Err(UpgradeError::NoWeights(path));
    }
    for entry in ggufs {
        let location = source.locate(&entry.name)?;
        let file = GgufFile::open_range(&location.path, location.offset, location.len).map_err(
            |source| UpgradeError::Unreadable {
                path: path.clone(),
                name: entry.name.clone(),
                source: Box::new(source),
            },
        )?;
        Model::load(Arc::new(file)).map_err(|source| UpgradeError::CannotRun {
            path: path.clone(),
            name: entry.name.clone(),
            source: Box::new(source),
        })?;
    }
    Ok(())
}

impl From<BundleError> for UpgradeError {
    fn from(e: BundleError) -> Self {
        UpgradeError::Bundle(Box::new(e))
    }
}

fn file_len(path: &Path) -> Result<u64, UpgradeError> {
    Ok(std::fs::metadata(path).map_err(io_error(path))?.len())
}

/// The engine's own permissions (it is executable), for the result.
fn executable_permissions(engine: &Path) -> Result<std::fs::Permissions, UpgradeError> {
    Ok(std::fs::metadata(engine)
        .map_err(io_error(engine))?
        .permissions())
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> UpgradeError + '_ {
    move |source| UpgradeError::Io {
        path: path.to_path_buf(),
        source,
    }
}
