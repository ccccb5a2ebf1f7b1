//! The bytes a GGUF is read from: a read-only memory map of a file (or an owned buffer, for tests
//! and synthetic models), shared through an `Arc` so that a model can keep tensor views alive
//! cheaply. A [`SharedBytes`] may be a window into a bigger mapping, such as one ZIP entry of
//! our own executable.

use std::fmt;
use std::fs::File;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;

use super::error::GgufError;

enum Storage {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

impl SharedBytes {
    /// Locks the whole underlying mapping in RAM (`mlock`), so the weights are never paged
    /// out; owned buffers need nothing.
    pub fn lock_in_memory(&self) -> std::io::Result<()> {
        match &*self.storage {
            Storage::Mapped(m) => crate::platform::lock_in_memory(m),
            Storage::Owned(_) => Ok(()),
        }
    }
}

/// A cheaply clonable window into a shared, immutable byte buffer.
#[derive(Clone)]
pub struct SharedBytes {
    storage: Arc<Storage>,
    start: usize,
    len: usize,
}

impl SharedBytes {
    /// Maps the whole file at `path` read-only.
    pub fn map_file(path: &Path) -> Result<SharedBytes, GgufError> {
        let io_err = |source| GgufError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        // SAFETY: the map is read-only and never handed out as mutable. Like every user of
        // mmap we rely on nobody truncating or rewriting the file while it is mapped; the
        // engine never writes to model files it has open.
        let map = unsafe { Mmap::map(&file) }.map_err(io_err)?;
        Ok(SharedBytes::from_mmap(map))
    }

    /// Shares an existing read-only mapping.
    pub fn from_mmap(map: Mmap) -> SharedBytes {
        let len = map.len();
        SharedBytes {
            storage: Arc::new(Storage::Mapped(map)),
            start: 0,
            len,
        }
    }

    /// Shares an owned buffer.
    pub fn from_vec(bytes: Vec<u8>) -> SharedBytes {
        let len = bytes.len();
        SharedBytes {
            storage: Arc::new(Storage::Owned(bytes)),
            start: 0,
            len,
        }
    }

    /// The window `offset..offset + len` of this one, or `None` if it does not fit inside.
    pub fn slice(&self, offset: u64, len: u64) -> Option<SharedBytes> {
        let end = offset.checked_add(len)?;
        if end > self.len as u64 {
            return None;
        }
        Some(SharedBytes {
            storage: Arc::clone(&self.storage),
            start: self.start + offset as usize,
            len: len as usize,
        })
    }

    /// Offset of this window from the start of the underlying file or buffer.
    pub fn start_in_backing(&self) -> u64 {
        self.start as u64
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.storage.bytes()[self.start..self.start + self.len]
    }
}

impl Deref for SharedBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match *self.storage {
            Storage::Mapped(_) => "mapped",
            Storage::Owned(_) => "owned",
        };
        write!(
            f,
            "SharedBytes({kind}, {}..{})",
            self.start,
            self.start + self.len
        )
    }
}
