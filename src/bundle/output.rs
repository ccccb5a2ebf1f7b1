//! The archive being written: a temporary file beside the target that replaces it only once
//! complete and on disk (written, fsynced, renamed over the target, the directory fsynced), and
//! is deleted on any error, so the target is never left half-written: a crash or `kill -9` at
//! any point leaves either the old archive or the new one, and at worst a stale
//! `.NAME.zipalign-PID[-N].tmp` beside it. The server's slot files are written the same way. Writes are positional; all-zero blocks are left as
//! holes, as `cp` does.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io;
use std::path::{Path, PathBuf};

use crate::platform::write_all_at;

/// Temporary names tried before giving up.
const MAX_ATTEMPTS: u32 = 100;
/// The longest file name most file systems take (bytes).
const NAME_MAX: usize = 255;
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
        Output::create_tagged(target, "zipalign")
    }

    /// [`Output::create`] with `tag` in the temporary file's name (`.NAME.TAG-PID.tmp`), saying
    /// which program left it.
    pub fn create_tagged(target: &Path, tag: &str) -> io::Result<Output> {
        let dir = parent_dir(target);
        let base = target.file_name().unwrap_or_default().to_string_lossy();
        let pid = std::process::id();
        // A stale file of a killed run may hold a name (the same pid, reused): take the next.
        let mut attempt = 0;
        let (file, temp) = loop {
            let suffix = match attempt {
                0 => String::new(),
                n => format!("-{n}"),
            };
            // The target's name may take all of NAME_MAX: the temporary one keeps as much of it
            // as fits (a collision with another long name only takes the next attempt).
            let tail = format!(".{tag}-{pid}{suffix}.tmp");
            let mut keep = base.len().min(NAME_MAX.saturating_sub(1 + tail.len()));
            while !base.is_char_boundary(keep) {
                keep -= 1;
            }
            let temp = dir.join(format!(".{}{tail}", &base[..keep]));
            match private_file_options().open(&temp) {
                Ok(file) => break (file, temp),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < MAX_ATTEMPTS => {
                    attempt += 1
                }
                Err(e) => return Err(e),
            }
        };
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
        write_all_at(&self.file, bytes, self.pos)?;
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
        write_all_at(&self.file, bytes, offset)
    }

    /// Fixes the length (a trailing hole), gives the file `permissions` (`None`: those of a
    /// new archive, `rw-r--r--` on Unix), flushes it to disk, renames it over the target, and
    /// flushes the directory so that the rename is durable.
    pub fn commit(mut self, permissions: Option<Permissions>) -> io::Result<()> {
        self.file.set_len(self.pos)?;
        if let Some(permissions) = permissions.or_else(new_archive_permissions) {
            self.file.set_permissions(permissions)?;
        }
        self.file.sync_all()?;
        fs::rename(&self.temp, &self.target)?;
        self.committed = true;
        sync_directory(&self.temp)
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.temp);
        }
    }
}

/// The directory holding `path` (`.` for a bare name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Flushes the directory holding `path` (its entries: a rename into it). File systems that
/// cannot sync a directory say so with `EINVAL`; there is nothing more to do on those.
#[cfg(unix)]
fn sync_directory(path: &Path) -> io::Result<()> {
    match File::open(parent_dir(path))?.sync_all() {
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => Ok(()),
        other => other,
    }
}

/// Windows cannot open a directory as a file to flush it; NTFS journals the rename itself.
#[cfg(windows)]
fn sync_directory(_path: &Path) -> io::Result<()> {
    Ok(())
}

/// Options that create a new file readable by its owner only (until [`Output::commit`] gives
/// it its final permissions); on Windows the new file inherits its directory's access rules.
fn private_file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

#[cfg(unix)]
fn new_archive_permissions() -> Option<Permissions> {
    Some(std::os::unix::fs::PermissionsExt::from_mode(0o644))
}

#[cfg(windows)]
fn new_archive_permissions() -> Option<Permissions> {
    None
}

fn is_zero(block: &[u8]) -> bool {
    // OR-folding fixed-size pieces vectorises; stop at the first piece with a set bit.
    block
        .chunks(256)
        .all(|piece| piece.iter().fold(0u8, |acc, &b| acc | b) == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzz/fuzz_targets/json_request.rs: a slot file name of 253 bytes (llama-server
    /// allows 255) was refused by the file system with "File name too long", since the
    /// temporary file's name added its tag and pid to it; the request was answered 500.
    #[test]
    fn a_target_name_of_the_longest_length_can_be_written() {
        let dir = std::env::temp_dir().join(format!("llamafile-output-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        for len in [NAME_MAX, NAME_MAX - 2] {
            // a multi-byte character where the temporary name is cut
            let name = format!("{}é{}", "x".repeat(200), "y".repeat(len - 202));
            assert_eq!(name.len(), len);
            let target = dir.join(&name);
            let mut out = Output::create_tagged(&target, "slot").unwrap();
            out.write(b"data").unwrap();
            out.commit(None).unwrap();
            assert_eq!(fs::read(&target).unwrap(), b"data");
        }
        let left: Vec<_> = fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 2, "only the two targets remain");
        fs::remove_dir_all(&dir).unwrap();
    }
}
