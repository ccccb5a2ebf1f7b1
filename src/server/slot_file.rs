//! Slot files (`--slot-save-path`): a slot's tokens and KV cache on disk, so that a later server
//! process on the same model can load them and skip evaluating that prompt again.
//!
//! Layout (little-endian): the magic `LFRSSLOT`, the format version (u32), the model's
//! fingerprint (u64), its name (u32 length, UTF-8), then the session's state
//! ([`Session::write_state`]: the tokens, then the cache). The fingerprint hashes the GGUF's
//! header, metadata and tensor table, its size, and the first and last 64 KiB of its tensor
//! data, so a file saved from another model (or another quantization of the same one) is
//! refused. Files are written atomically: a temporary file in the same directory, fsynced,
//! renamed over the target, the directory fsynced (`bundle::output`).
//!
//! Owns the file format and the file names a request may use; the slots themselves are the
//! scheduler's.

use crate::bundle::output::Output;
use crate::engine::session::{Session, SessionStateError};
use crate::gguf::GgufFile;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

const MAGIC: &[u8; 8] = b"LFRSSLOT";
const VERSION: u32 = 2;
/// Bytes of tensor data hashed at each end.
const SAMPLE: usize = 64 * 1024;

/// Which model a slot file belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelId {
    pub fingerprint: u64,
    /// `general.name`, or the architecture (for messages only).
    pub name: String,
}

impl ModelId {
    pub fn of(file: &GgufFile) -> ModelId {
        let bytes = file.bytes();
        let data = (file.data_offset() as usize).min(bytes.len());
        let mut h = Fnv::new();
        h.eat(&(bytes.len() as u64).to_le_bytes());
        h.eat(&bytes[..data]);
        let tensors = &bytes[data..];
        h.eat(&tensors[..SAMPLE.min(tensors.len())]);
        h.eat(&tensors[tensors.len().saturating_sub(SAMPLE)..]);
        let name = file
            .get_str("general.name")
            .or_else(|| file.architecture())
            .unwrap_or("unnamed model");
        ModelId {
            fingerprint: h.0,
            name: name.to_string(),
        }
    }
}

/// 64-bit FNV-1a: a fingerprint against mix-ups, not against forgery.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn eat(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Why a slot file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("no such file")]
    NotFound,
    #[error("cannot read it: {0}")]
    Io(#[from] io::Error),
    #[error("it is not a slot file")]
    NotASlotFile,
    #[error("it has format version {0}; this build reads version {VERSION}")]
    Version(u32),
    #[error("it was saved from another model ({0}), not the one this server runs")]
    OtherModel(String),
    #[error("its contents do not fit this server: {0}")]
    State(#[from] SessionStateError),
    #[error("it has data after the slot's state")]
    Trailing,
}

/// Checks a slot file name from a request as llama-server does: a plain name (no `/`, `\`,
/// `..`), at most 255 bytes, without control characters, Windows' reserved `:*?"<>|`, their
/// Unicode look-alikes, a replacement character or byte-order mark, a leading or trailing
/// space or a trailing dot. The error says what is wrong.
pub fn check_filename(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > 255 {
        return Err("is longer than 255 bytes".into());
    }
    if name.contains(['/', '\\']) || name.contains("..") {
        return Err("must be a plain file name: no path separators or '..'".into());
    }
    if let Some(c) = name.chars().find(|&c| {
        c.is_control()
            || matches!(
                c,
                ':' | '*'
                    | '?'
                    | '"'
                    | '<'
                    | '>'
                    | '|'
                    | '\u{FF0E}'
                    | '\u{2215}'
                    | '\u{2216}'
                    | '\u{FFFD}'
                    | '\u{FEFF}'
            )
    }) {
        return Err(format!("must not contain {c:?}"));
    }
    if name.starts_with(' ') || name.ends_with(' ') || name.ends_with('.') {
        return Err("must not start or end with a space, or end with '.'".into());
    }
    Ok(())
}

/// Writes `session` to `path` for model `id`, atomically. Returns the file's size.
pub fn save(session: &Session, id: &ModelId, path: &Path) -> io::Result<u64> {
    let mut out = Output::create_tagged(path, "slot")?;
    let mut w = BufWriter::with_capacity(1 << 20, Sink(&mut out));
    w.write_all(MAGIC)?;
    w.write_all(&VERSION.to_le_bytes())?;
    w.write_all(&id.fingerprint.to_le_bytes())?;
    w.write_all(&(id.name.len() as u32).to_le_bytes())?;
    w.write_all(id.name.as_bytes())?;
    session.write_state(&mut w)?;
    w.flush()?;
    drop(w);
    let size = out.position();
    out.commit(None)?;
    Ok(size)
}

/// Loads `path` into `session` if it was saved for model `id`. Returns the bytes read. On an
/// error the session is left empty.
pub fn restore(session: &mut Session, id: &ModelId, path: &Path) -> Result<u64, RestoreError> {
    session.truncate(0);
    let file = std::fs::File::open(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => RestoreError::NotFound,
        _ => RestoreError::Io(e),
    })?;
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut magic = [0u8; 8];
    if r.read_exact(&mut magic).is_err() || &magic != MAGIC {
        return Err(RestoreError::NotASlotFile);
    }
    let mut word = [0u8; 4];
    r.read_exact(&mut word)?;
    let version = u32::from_le_bytes(word);
    if version != VERSION {
        return Err(RestoreError::Version(version));
    }
    let mut long = [0u8; 8];
    r.read_exact(&mut long)?;
    let fingerprint = u64::from_le_bytes(long);
    r.read_exact(&mut word)?;
    let name_len = u32::from_le_bytes(word) as usize;
    if name_len > 4096 {
        return Err(RestoreError::NotASlotFile);
    }
    let mut name = vec![0u8; name_len];
    r.read_exact(&mut name)?;
    if fingerprint != id.fingerprint {
        return Err(RestoreError::OtherModel(
            String::from_utf8_lossy(&name).into_owned(),
        ));
    }
    let state = session.read_state(&mut r)?;
    if r.read(&mut [0u8; 1])? != 0 {
        session.truncate(0);
        return Err(RestoreError::Trailing);
    }
    Ok(24 + name_len as u64 + state)
}

/// [`Output`] as a stream.
struct Sink<'a>(&'a mut Output);

impl Write for Sink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::check_filename;

    #[test]
    fn file_names_are_checked_as_llama_server_checks_them() {
        for ok in ["slot0.bin", "my cache", "a.b.c", "ünïcode"] {
            assert_eq!(check_filename(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "../x",
            "a/b",
            "a\\b",
            "a..b",
            ".",
            "x.",
            " x",
            "x ",
            "a:b",
            "a*b",
            "a\u{0}b",
            "a\u{7f}",
            "a\u{2215}b",
            "a\u{FEFF}",
        ] {
            assert!(check_filename(bad).is_err(), "{bad:?}");
        }
        assert!(check_filename(&"x".repeat(256)).is_err());
        assert!(check_filename(&"x".repeat(255)).is_ok());
    }
}
