//! Our own executable as a ZIP archive: the entries appended to it by `zipalign` (the GGUF
//! weights, `.args`), and resolving `-m NAME` to a byte range that can be mapped in place.
//!
//! Owns: finding the ZIP ([`directory`], ZIP64 aware), checking that an entry can be mapped
//! (stored, aligned), reading small entries, and [`resolve_model`] (whose rule includes side
//! files beside the executable), and the pieces of writing one ([`output`]: a temporary file
//! renamed into place once on disk; [`pack`]: aligned entries and the central directory;
//! [`records`]: their bytes), used by `tools/zipalign` and `--upgrade-engine`. It does not map
//! or parse GGUF data (that is `gguf`'s job, given a [`ModelLocation`]).
//!
//! ```no_run
//! use llamafile::bundle::{resolve_model, Bundle};
//! let own = Bundle::open_self()?;
//! let model = resolve_model("model.gguf", own.as_ref())?;
//! println!("{} bytes at offset {} of {}", model.len, model.offset, model.path.display());
//! # Ok::<(), llamafile::bundle::BundleError>(())
//! ```

pub mod crc32;
pub mod directory;
pub mod format;
pub mod output;
pub mod pack;
pub mod records;
mod resolve;

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::platform::read_exact_at;

pub use directory::{Directory, Entry, ZipError};
pub use resolve::{resolve_model, resolve_model_beside, ModelLocation};

/// Entry data must start at a multiple of this for the GGUF inside to be usable in place
/// (GGUF's default alignment); a multiple of the page size also allows a zero-offset mapping.
pub const MIN_DATA_ALIGNMENT: u64 = 32;

/// The most [`Bundle::read_small`] will read: small entries are configuration, not weights.
pub const SMALL_ENTRY_LIMIT: u64 = 1 << 20;

/// Why a model or an entry could not be found or used.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Zip { path: PathBuf, source: ZipError },
    #[error("{}: no entry named {name:?} in its ZIP", path.display())]
    MissingEntry { path: PathBuf, name: String },
    #[error(
        "{}: entry {name:?} is compressed (method {method}); repack it stored with zipalign",
        path.display()
    )]
    Compressed {
        path: PathBuf,
        name: String,
        method: u16,
    },
    #[error(
        "{}: entry {name:?} starts at offset {offset}, not a multiple of {MIN_DATA_ALIGNMENT}; repack it with zipalign",
        path.display()
    )]
    Misaligned {
        path: PathBuf,
        name: String,
        offset: u64,
    },
    #[error("{}: entry {name:?} is {len} bytes, more than the {SMALL_ENTRY_LIMIT} allowed", path.display())]
    TooLarge {
        path: PathBuf,
        name: String,
        len: u64,
    },
    #[error("{}: entry {name:?} fails its CRC-32 check", path.display())]
    BadChecksum { path: PathBuf, name: String },
    #[error("{}: neither a GGUF file (its magic is {magic:?}, not \"GGUF\") nor a ZIP archive (no end of central directory record; truncated?)", path.display())]
    NotAModel { path: PathBuf, magic: String },
    #[error("{}: its ZIP holds no .gguf entry", path.display())]
    NoGgufInside { path: PathBuf },
    #[error("{}: its ZIP holds several .gguf entries ({}), so which is the model is unclear", path.display(), names.join(", "))]
    SeveralGgufInside { path: PathBuf, names: Vec<String> },
    #[error("model {name:?}: no such file, {}{}", match own { Some(p) => format!("no such entry in {}", p.display()), None => "this executable holds no ZIP".to_string() }, match beside { Some(d) => format!(", and not beside the program in {}", d.display()), None => String::new() })]
    ModelNotFound {
        name: String,
        own: Option<PathBuf>,
        /// The directory searched for a side file, if any.
        beside: Option<PathBuf>,
    },
}

/// A file that ends with a ZIP, its entries listed once.
#[derive(Debug)]
pub struct Bundle {
    path: PathBuf,
    file: File,
    directory: Directory,
}

impl Bundle {
    /// Opens the running executable; `Ok(None)` when nothing is appended to it.
    pub fn open_self() -> Result<Option<Bundle>, BundleError> {
        let path = std::env::current_exe().map_err(|source| BundleError::Io {
            path: PathBuf::from("/proc/self/exe"),
            source,
        })?;
        Bundle::open(&path)
    }

    /// Opens `path` and lists its ZIP; `Ok(None)` when it does not end with one.
    pub fn open(path: &Path) -> Result<Option<Bundle>, BundleError> {
        let file = File::open(path).map_err(|source| BundleError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let directory = directory::read_directory(&file).map_err(|source| BundleError::Zip {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(directory.map(|directory| Bundle {
            path: path.to_path_buf(),
            file,
            directory,
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the ZIP starts: the length of the executable in front of it.
    pub fn archive_start(&self) -> u64 {
        self.directory.archive_start
    }

    /// The open file, for copying entries out of it.
    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn entries(&self) -> &[Entry] {
        &self.directory.entries
    }

    /// The entry called `name` or `/zip/name`.
    pub fn entry(&self, name: &str) -> Option<&Entry> {
        let name = name.strip_prefix("/zip/").unwrap_or(name);
        self.entries().iter().find(|e| e.name == name)
    }

    /// Entries whose name ends in `.gguf` (any case), in archive order.
    pub fn gguf_entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries()
            .iter()
            .filter(|e| e.name.to_ascii_lowercase().ends_with(".gguf"))
    }

    /// Reads a small stored entry (such as `.args`) whole, checking its CRC-32.
    pub fn read_small(&self, name: &str) -> Result<Vec<u8>, BundleError> {
        let entry = self.entry(name).ok_or_else(|| self.missing(name))?;
        self.check_stored(entry)?;
        if entry.compressed_size > SMALL_ENTRY_LIMIT {
            return Err(BundleError::TooLarge {
                path: self.path.clone(),
                name: entry.name.clone(),
                len: entry.compressed_size,
            });
        }
        let mut data = vec![0u8; entry.compressed_size as usize];
        read_exact_at(&self.file, &mut data, entry.data_offset).map_err(|source| {
            BundleError::Io {
                path: self.path.clone(),
                source,
            }
        })?;
        if crc32::crc32(&data) != entry.crc32 {
            return Err(BundleError::BadChecksum {
                path: self.path.clone(),
                name: entry.name.clone(),
            });
        }
        Ok(data)
    }

    /// Where entry `name`'s bytes lie, once they are known to be usable in place.
    pub fn locate(&self, name: &str) -> Result<ModelLocation, BundleError> {
        let entry = self.entry(name).ok_or_else(|| self.missing(name))?;
        self.location_of(entry)
    }

    fn location_of(&self, entry: &Entry) -> Result<ModelLocation, BundleError> {
        self.check_stored(entry)?;
        if !entry.data_offset.is_multiple_of(MIN_DATA_ALIGNMENT) {
            return Err(BundleError::Misaligned {
                path: self.path.clone(),
                name: entry.name.clone(),
                offset: entry.data_offset,
            });
        }
        Ok(ModelLocation {
            path: self.path.clone(),
            offset: entry.data_offset,
            len: entry.compressed_size,
        })
    }

    fn check_stored(&self, entry: &Entry) -> Result<(), BundleError> {
        if entry.is_stored() && entry.compressed_size == entry.uncompressed_size {
            Ok(())
        } else {
            Err(BundleError::Compressed {
                path: self.path.clone(),
                name: entry.name.clone(),
                method: entry.method,
            })
        }
    }

    fn missing(&self, name: &str) -> BundleError {
        BundleError::MissingEntry {
            path: self.path.clone(),
            name: name.to_string(),
        }
    }
}
