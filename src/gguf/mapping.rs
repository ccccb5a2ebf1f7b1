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
    /// A file's pages, mapped read-only.
    File(Mmap),
    /// Anonymous memory, written once and then read-only.
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::File(m) | Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

impl SharedBytes {
    /// Locks the whole underlying mapping in RAM (`mlock`), so the weights are never paged
    /// out; owned buffers need nothing.
    pub fn lock_in_memory(&self) -> std::io::Result<()> {
        match &*self.storage {
            Storage::File(m) | Storage::Mapped(m) => crate::platform::lock_in_memory(m),
            Storage::Owned(_) => Ok(()),
        }
    }

    /// Gives back the memory of the pages wholly inside `part` (a sub-slice of these bytes)
    /// when they are a file's mapped pages, once their data has been copied elsewhere (weights
    /// regrouped for the CPU kernels): a later read maps them again from the page cache or the
    /// file. Anonymous and owned bytes are kept, since theirs would be lost; elsewhere than
    /// Unix nothing is done.
    pub fn release_pages(&self, part: &[u8]) {
        #[cfg(unix)]
        if let Storage::File(map) = &*self.storage {
            let base = map.as_ptr() as usize;
            let start = part.as_ptr() as usize;
            let end = start + part.len();
            if start < base || end > base + map.len() {
                return;
            }
            // SAFETY: sysconf has no preconditions.
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
            let (first, last) = (start.next_multiple_of(page), end / page * page);
            if first < last {
                // SAFETY: the map is a read-only mapping of a file nobody rewrites while it is
                // mapped (see `map_file`): after MADV_DONTNEED a read of these pages maps the
                // same bytes again, so no reference into them sees a change. Only advice: an
                // error (locked pages) leaves the pages where they are.
                let _ = unsafe {
                    map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        first - base,
                        last - first,
                    )
                };
            }
        }
        #[cfg(not(unix))]
        let _ = part;
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
        // Only advice: where the kernel has no transparent huge pages the weights are read in
        // small pages, as without it.
        let _ = crate::platform::advise_huge_pages(&map);
        let len = map.len();
        Ok(SharedBytes {
            storage: Arc::new(Storage::File(map)),
            start: 0,
            len,
        })
    }

    /// Reads `len` bytes of the file at `path` from `offset` into anonymous memory (`--no-mmap`),
    /// backed by transparent huge pages where the kernel has them (Linux, `madvise` mode
    /// included), and shares them read-only. Unlike a file mapping's page cache, anonymous
    /// memory gets 2 MiB pages on any file system, so the weights stream with 512 times fewer
    /// TLB entries; the price is reading the whole range before the first token.
    pub fn read_file_range(path: &Path, offset: u64, len: u64) -> Result<SharedBytes, GgufError> {
        use std::io::{Read, Seek, SeekFrom};
        let io_err = |source| GgufError::Io {
            path: path.to_owned(),
            source,
        };
        let mut file = File::open(path).map_err(io_err)?;
        let size = file.metadata().map_err(io_err)?.len();
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(GgufError::RangeOutsideFile {
                path: path.to_owned(),
                offset,
                len,
                size,
            });
        }
        let n = usize::try_from(len).map_err(|_| {
            io_err(std::io::Error::other(
                "larger than this machine's address space",
            ))
        })?;
        let mut mem = memmap2::MmapMut::map_anon(n.max(1)).map_err(io_err)?;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let _ = mem.advise(memmap2::Advice::HugePage);
        file.seek(SeekFrom::Start(offset)).map_err(io_err)?;
        file.read_exact(&mut mem[..n]).map_err(io_err)?;
        let map = mem.make_read_only().map_err(io_err)?;
        let mut bytes = SharedBytes::from_mmap(map);
        bytes.len = n;
        Ok(bytes)
    }

    /// `len` bytes of anonymous memory (transparent huge pages where the kernel has them, as
    /// [`SharedBytes::read_file_range`]), written once by `fill` and then shared read-only: the
    /// home of data derived from the weights at load, such as regrouped copies.
    pub fn anon_filled(len: usize, fill: impl FnOnce(&mut [u8])) -> std::io::Result<SharedBytes> {
        let mut mem = memmap2::MmapMut::map_anon(len.max(1))?;
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let _ = mem.advise(memmap2::Advice::HugePage);
        fill(&mut mem[..len]);
        let mut bytes = SharedBytes::from_mmap(mem.make_read_only()?);
        bytes.len = len;
        Ok(bytes)
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
            Storage::File(_) => "file",
            Storage::Mapped(_) => "anonymous",
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::SharedBytes;

    /// The mapping of a model file carries the huge-page advice (`hg` among its `VmFlags` in
    /// `/proc/self/smaps`), so the page cache reads the weights in 2 MiB folios.
    #[test]
    fn model_files_are_mapped_with_huge_page_advice() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            eprintln!("skipped: this kernel has no transparent huge pages");
            return;
        }
        let path = std::env::temp_dir().join(format!("llamafile-thp-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 4 << 20]).unwrap();
        let bytes = SharedBytes::map_file(&path).unwrap();
        let start = bytes.as_slice().as_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        std::fs::remove_file(&path).unwrap();
        let mut in_ours = false;
        let mut flags = None;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    in_ours = (lo..hi).contains(&start);
                    continue;
                }
            }
            if in_ours {
                if let Some(rest) = line.strip_prefix("VmFlags:") {
                    flags = Some(
                        rest.split_whitespace()
                            .map(str::to_owned)
                            .collect::<Vec<_>>(),
                    );
                }
            }
        }
        let flags = flags.expect("the mapping is listed in /proc/self/smaps");
        assert!(flags.iter().any(|f| f == "hg"), "VmFlags: {flags:?}");
    }

    /// `--no-mmap` reads exactly the range asked for, and a range past the file's end is
    /// refused with the file's size.
    #[test]
    fn a_range_read_into_memory_holds_those_bytes() {
        let path = std::env::temp_dir().join(format!("llamafile-read-{}", std::process::id()));
        let data: Vec<u8> = (0..3 << 20).map(|i| (i * 31 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let got = SharedBytes::read_file_range(&path, 4096, 2 << 20).unwrap();
        assert_eq!(got.as_slice(), &data[4096..4096 + (2 << 20)]);
        let past = SharedBytes::read_file_range(&path, 1 << 20, 3 << 20);
        std::fs::remove_file(&path).unwrap();
        let e = past
            .expect_err("a range past the end is refused")
            .to_string();
        assert!(e.contains(&format!("{}", 3 << 20)), "{e}");
    }
}
