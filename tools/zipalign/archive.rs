//! Rewriting an archive with files added: the bytes before the ZIP (an executable) copied as
//! they are, the entries not being replaced copied and re-aligned, each new FILE streamed in
//! with its CRC-32, then a new central directory and ZIP64 end records.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use anyhow::{bail, Context, Result};
use llamafile::bundle::crc32::Crc32;
use llamafile::bundle::directory::read_directory;
use llamafile::bundle::format::{FLAG_UTF8, HOST_UNIX, METHOD_STORED, VERSION_ZIP64};
use llamafile::bundle::output::Output;
use llamafile::bundle::pack::{copy_entry, copy_range, start_entry, write_central_directory};
use llamafile::bundle::{records, Entry};

use crate::options::Options;

/// The time stamped on entries without `-N`: fixed, so that output is reproducible.
const FIXED_TIMESTAMP: i64 = 1_700_000_000;

/// A FILE to add, opened and named before anything is written.
struct Input {
    path: PathBuf,
    name: String,
    file: File,
    metadata: fs::Metadata,
}

pub fn run(opts: &Options) -> Result<()> {
    let inputs = open_inputs(opts)?;
    let target = match fs::canonicalize(&opts.zip) {
        Ok(real) => real,
        Err(e) if e.kind() == io::ErrorKind::NotFound => opts.zip.clone(),
        Err(e) => return Err(e).with_context(|| opts.zip.display().to_string()),
    };
    let zip_name = opts.zip.display().to_string();
    let source = match File::open(&target) {
        Ok(file) => Some(file),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).context(zip_name),
    };
    let permissions = match &source {
        Some(file) => {
            let metadata = file.metadata().context(zip_name.clone())?;
            if !metadata.is_file() {
                bail!("{zip_name}: not a regular file");
            }
            Some(metadata.permissions())
        }
        None => None,
    };
    let mut out = Output::create(&target)
        .with_context(|| format!("{zip_name}: cannot create a temporary file beside it"))?;
    let mut buf = vec![0u8; llamafile::bundle::pack::CHUNK];
    let mut entries = Vec::new();
    if let Some(source) = &source {
        let replaced: HashSet<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
        entries = copy_existing(source, &replaced, opts, &mut out, &mut buf)
            .with_context(|| zip_name.clone())?;
    }
    for input in &inputs {
        let entry = add_file(input, opts, &mut out, &mut buf)?;
        if opts.verbose {
            eprintln!(
                "zipalign: {} -> {} ({} bytes at offset {})",
                input.path.display(),
                entry.name,
                entry.uncompressed_size,
                entry.data_offset
            );
        }
        entries.push(entry);
    }
    write_central_directory(&entries, &mut out).context(zip_name.clone())?;
    // Windows does not replace a file that is open; close the old archive first.
    drop(source);
    out.commit(permissions).context(zip_name)?;
    Ok(())
}

fn open_inputs(opts: &Options) -> Result<Vec<Input>> {
    let mut names = HashSet::new();
    let mut inputs = Vec::new();
    for path in &opts.files {
        let name = entry_name(path, opts.junk_paths)?;
        if !names.insert(name.clone()) {
            bail!(
                "{}: entry name {name:?} given more than once",
                path.display()
            );
        }
        let file = File::open(path).with_context(|| path.display().to_string())?;
        let metadata = file
            .metadata()
            .with_context(|| path.display().to_string())?;
        if !metadata.is_file() {
            bail!("{}: not a regular file", path.display());
        }
        inputs.push(Input {
            path: path.clone(),
            name,
            file,
            metadata,
        });
    }
    Ok(inputs)
}

/// The entry name for `path`: its base name with `-j`, else the path without leading `/`
/// and `./`.
fn entry_name(path: &Path, junk_paths: bool) -> Result<String> {
    let text = path
        .to_str()
        .with_context(|| format!("{}: name is not UTF-8", path.display()))?;
    let mut name = if junk_paths {
        path.file_name().and_then(|n| n.to_str()).unwrap_or("")
    } else {
        text.trim_start_matches('/')
    };
    while let Some(rest) = name.strip_prefix("./") {
        name = rest.trim_start_matches('/');
    }
    if name.is_empty() || name.ends_with('/') {
        bail!("{text}: no file name to store it under");
    }
    if name.len() > usize::from(u16::MAX) {
        bail!("{text}: name longer than a ZIP allows");
    }
    Ok(name.to_string())
}

/// Copies what precedes the ZIP in `source`, then every entry not in `replaced`.
fn copy_existing(
    source: &File,
    replaced: &HashSet<&str>,
    opts: &Options,
    out: &mut Output,
    buf: &mut [u8],
) -> Result<Vec<Entry>> {
    let directory = read_directory(source)?;
    let prefix_len = match &directory {
        Some(dir) => dir.archive_start,
        None => source.metadata()?.len(),
    };
    copy_range(source, 0, prefix_len, out, buf)?;
    let mut kept = Vec::new();
    for old in directory.map(|d| d.entries).unwrap_or_default() {
        if replaced.contains(old.name.as_str()) {
            if opts.verbose {
                eprintln!("zipalign: replacing {}", old.name);
            }
            continue;
        }
        let entry = copy_entry(source, &old, opts.alignment, out, buf)?;
        if opts.verbose {
            eprintln!("zipalign: keeping {}", entry.name);
        }
        kept.push(entry);
    }
    Ok(kept)
}

fn add_file(input: &Input, opts: &Options, out: &mut Output, buf: &mut [u8]) -> Result<Entry> {
    let seconds = if opts.use_mtime {
        input
            .metadata
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(FIXED_TIMESTAMP, |d| d.as_secs() as i64)
    } else {
        FIXED_TIMESTAMP
    };
    let (dos_time, dos_date) = records::dos_time_date(seconds);
    let mut entry = Entry {
        name: input.name.clone(),
        version_made_by: HOST_UNIX | VERSION_ZIP64,
        flags: FLAG_UTF8,
        method: METHOD_STORED,
        dos_time,
        dos_date,
        crc32: 0,
        compressed_size: 0,
        uncompressed_size: 0,
        external_attributes: (0o100_000 | unix_mode(&input.metadata)) << 16,
        local_header_offset: 0,
        data_offset: 0,
    };
    start_entry(&mut entry, opts.alignment, out);
    let read_error = || input.path.display().to_string();
    let mut crc = Crc32::new();
    let mut size = 0u64;
    let mut reader = &input.file;
    loop {
        let n = fill(&mut reader, buf).with_context(read_error)?;
        if n == 0 {
            break;
        }
        crc.update(&buf[..n]);
        out.write_sparse(&buf[..n])
            .with_context(|| format!("{}: write failed", opts.zip.display()))?;
        size += n as u64;
    }
    entry.crc32 = crc.finish();
    entry.compressed_size = size;
    entry.uncompressed_size = size;
    out.write_back(entry.local_header_offset, &records::local_header(&entry))
        .with_context(|| opts.zip.display().to_string())?;
    Ok(entry)
}

/// The permission bits stored for an entry: the file's own on Unix; on Windows `r--r--r--`
/// for a read-only file, else `rw-r--r--`.
#[cfg(unix)]
fn unix_mode(metadata: &fs::Metadata) -> u32 {
    std::os::unix::fs::MetadataExt::mode(metadata) & 0o7777
}

#[cfg(windows)]
fn unix_mode(metadata: &fs::Metadata) -> u32 {
    if metadata.permissions().readonly() {
        0o444
    } else {
        0o644
    }
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn fill(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names() {
        let name = |p: &str, junk| entry_name(Path::new(p), junk).map_err(|e| e.to_string());
        assert_eq!(name("/abs/dir/m.gguf", false).unwrap(), "abs/dir/m.gguf");
        assert_eq!(name("././/x/.args", false).unwrap(), "x/.args");
        assert_eq!(name("/abs/dir/m.gguf", true).unwrap(), "m.gguf");
        assert_eq!(name("rel/.args", true).unwrap(), ".args");
        assert!(name("/", false).is_err());
        assert!(name("dir/", false).is_err());
    }
}
