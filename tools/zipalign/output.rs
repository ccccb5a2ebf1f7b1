//! The archive being written: a temporary file beside the target that replaces it only once
//! complete (renamed over it), and is deleted on any error, so the target is never left
//! half-written. Writes are positional; all-zero blocks are left as holes, as `cp` does.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Blocks of this size that are all zero are skipped (read back as zeros from the hole).
const HOLE_BLOCK: usize = 64 * 1024;

pub struct Output {
    file: File,
    pos: u64,
    temp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl Output {
    /// Creates the temporary file that will replace `target`.
    pub fn create(target: &Path) -> io::Result<Output> {
        let dir = match target.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let base = target.file_name().unwrap_or_default().to_string_lossy();
        let temp = dir.join(format!(".{base}.zipalign-{}.tmp", std::process::id()));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&temp)?;
        Ok(Output {
            file,
            pos: 0,
            temp,
            target: target.to_path_buf(),
            committed: false,
        })
    }

    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Moves forward to `pos`; the bytes skipped read as zeros.
    pub fn skip_to(&mut self, pos: u64) {
        assert!(pos >= self.pos, "output only moves forward");
        self.pos = pos;
    }

    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, self.pos)?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    /// Like [`Output::write`], but leaves all-zero blocks as holes.
    pub fn write_sparse(&mut self, bytes: &[u8]) -> io::Result<()> {
        for block in bytes.chunks(HOLE_BLOCK) {
            if is_zero(block) {
                self.pos += block.len() as u64;
            } else {
                self.write(block)?;
            }
        }
        Ok(())
    }

    /// Writes `bytes` at an earlier `offset` (a header whose fields were unknown until its data
    /// was written); the position does not move.
    pub fn write_back(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        assert!(
            offset + bytes.len() as u64 <= self.pos,
            "only fills in what is behind"
        );
        self.file.write_all_at(bytes, offset)
    }

    /// Fixes the length (a trailing hole), gives the file `permissions`, and renames it over
    /// the target.
    pub fn commit(mut self, permissions: Permissions) -> io::Result<()> {
        self.file.set_len(self.pos)?;
        self.file.set_permissions(permissions)?;
        fs::rename(&self.temp, &self.target)?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.temp);
        }
    }
}

fn is_zero(block: &[u8]) -> bool {
    // OR-folding fixed-size pieces vectorises; stop at the first piece with a set bit.
    block
        .chunks(256)
        .all(|piece| piece.iter().fold(0u8, |acc, &b| acc | b) == 0)
}
