//! The steps of writing an archive, shared by `tools/zipalign` and `--upgrade-engine`: placing
//! an entry so its data starts on an alignment boundary, copying bytes or whole stored entries
//! from another file (streamed through one fixed buffer, never whole), and closing the archive
//! with its central directory and end records. Where the bytes go is [`super::output::Output`].

use std::fs::File;
use std::io;

use super::output::Output;
use super::{records, Entry};
use crate::platform::read_exact_at;

/// Where entries' data starts unless told otherwise (zipalign's `-a`, `--upgrade-engine`,
/// and `packaging/make-llamafile.sh`'s `ZIPALIGN_ALIGN`): 64 KiB, a multiple of every page
/// size in use, so a GGUF maps in place on any platform.
pub const DEFAULT_ALIGNMENT: u64 = 65536;

/// Size of the streaming buffer callers pass in: fixed, however large the file.
pub const CHUNK: usize = 1 << 20;

/// Places `entry`'s local header so that its data starts on an `alignment` boundary, and moves
/// the output to that data.
pub fn start_entry(entry: &mut Entry, alignment: u64, out: &mut Output) {
    let header_len = records::local_header_len(&entry.name);
    let data_offset = (out.position() + header_len).next_multiple_of(alignment);
    entry.local_header_offset = data_offset - header_len;
    entry.data_offset = data_offset;
    out.skip_to(data_offset);
}

/// Appends `len` bytes of `source` from `offset`.
pub fn copy_range(
    source: &File,
    offset: u64,
    len: u64,
    out: &mut Output,
    buf: &mut [u8],
) -> io::Result<()> {
    let mut done = 0;
    while done < len {
        let n = buf.len().min((len - done) as usize);
        read_exact_at(source, &mut buf[..n], offset + done)?;
        out.write_sparse(&buf[..n])?;
        done += n as u64;
    }
    Ok(())
}

/// Appends entry `old` of `source` as it is stored (no recompression, its CRC kept), re-aligned
/// to `alignment`; returns the entry as written.
pub fn copy_entry(
    source: &File,
    old: &Entry,
    alignment: u64,
    out: &mut Output,
    buf: &mut [u8],
) -> io::Result<Entry> {
    let mut entry = old.clone();
    start_entry(&mut entry, alignment, out);
    copy_range(source, old.data_offset, old.compressed_size, out, buf)?;
    out.write_back(entry.local_header_offset, &records::local_header(&entry))?;
    Ok(entry)
}

/// Appends the central directory of `entries` and the end records.
pub fn write_central_directory(entries: &[Entry], out: &mut Output) -> io::Result<()> {
    let offset = out.position();
    for entry in entries {
        out.write(&records::central_header(entry))?;
    }
    let size = out.position() - offset;
    out.write(&records::end_records(entries.len() as u64, offset, size))
}
