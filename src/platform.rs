//! The few operating-system calls whose form differs between Linux (and other Unix systems) and
//! Windows: reading and writing a file at an offset, locking mapped memory in RAM, asking for a
//! mapping in huge pages, and raising the limit of open files.
//!
//! Owns only those calls, each with the same meaning on every platform, or a plain "not on
//! Windows" error where Windows has no equivalent worth its cost. Everything else the engine
//! does (mapping files through memmap2, sockets, threads) is portable through the standard
//! library and needs nothing here. On Unix these are the `pread`/`pwrite` family, `mlock` and `setrlimit`.

use std::fs::File;
use std::io;

/// Fills `buf` from `file` at byte `offset`. On Unix the file's cursor does not move; on Windows
/// it does (`ReadFile` with an offset), so callers never rely on the cursor of a file they read
/// this way.
pub fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::FileExt;
        let mut done = 0;
        while done < buf.len() {
            match file.seek_read(&mut buf[done..], offset + done as u64) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "failed to fill whole buffer",
                    ))
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Writes all of `bytes` to `file` at byte `offset` (the cursor: as [`read_exact_at`]).
pub fn write_all_at(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::FileExt;
        let mut done = 0;
        while done < bytes.len() {
            match file.seek_write(&bytes[done..], offset + done as u64) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "failed to write whole buffer",
                    ))
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Locks a whole mapping in RAM (`mlock`), so it is never paged out. Windows' `VirtualLock`
/// is bounded by the process's minimum working set, which would have to be raised first; it
/// is not built, and this says so.
pub fn lock_in_memory(map: &memmap2::Mmap) -> io::Result<()> {
    #[cfg(unix)]
    {
        map.lock()
    }
    #[cfg(windows)]
    {
        let _ = map;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "not on Windows: locking memory is not built there",
        ))
    }
}

/// Asks Linux to back a mapping with transparent huge pages (`MADV_HUGEPAGE`). For a file this
/// makes the page cache read it in 2 MiB folios, mapped by one page-table entry each: the
/// weights then stream through memory with 512 times fewer TLB entries and in physically
/// contiguous runs the hardware prefetchers can follow (Qwen2.5-1.5B generation on a
/// bandwidth-bound Xeon: 13.3 to 18.0 t/s). Pages already cached in small folios stay as they
/// are. Advisory: a kernel without transparent huge pages answers an error, which callers may
/// ignore; other systems have no such advice, and this does nothing there.
pub fn advise_huge_pages(map: &memmap2::Mmap) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        map.advise(memmap2::Advice::HugePage)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = map;
        Ok(())
    }
}

/// Raises this process's limit of open files to the most it may have (`RLIMIT_NOFILE`'s hard
/// limit, at most 65536; often 1024 soft against 4096 or more hard) and returns the limit now in force; a
/// server holds one file per waiting connection. `None` where there is no such limit
/// (Windows has none that matters at this scale).
pub fn raise_open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one rlimit struct, which `lim` is.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return None;
        }
        // An unlimited hard limit is not a number setrlimit takes for files; 65536 is plenty.
        let want = lim.rlim_max.min(65536);
        if lim.rlim_cur < want {
            let raised = libc::rlimit {
                rlim_cur: want,
                ..lim
            };
            // SAFETY: setrlimit reads one rlimit struct, which `raised` is.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
                lim = raised;
            }
        }
        Some(lim.rlim_cur)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// What to tell a user whose [`lock_in_memory`] failed.
pub const LOCK_HINT: &str = if cfg!(unix) {
    "; raise `ulimit -l`"
} else {
    ""
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positional_writes_and_reads_meet() {
        let dir = std::env::temp_dir().join(format!("llamafile-platform-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        write_all_at(&file, b"world", 6).unwrap();
        write_all_at(&file, b"hello ", 0).unwrap();
        let mut buf = [0u8; 5];
        read_exact_at(&file, &mut buf, 6).unwrap();
        assert_eq!(&buf, b"world");
        let err = read_exact_at(&file, &mut [0u8; 4], 9).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
