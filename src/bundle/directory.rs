//! Finding a ZIP at the end of a file and listing its entries: the end record scan (ZIP64
//! aware), the central directory walk, and each entry's local header (for its data offset).
//!
//! This is the one implementation of the end-of-archive scan; `tools/zipalign` and
//! [`super::Bundle`] both call [`read_directory`]. It reads records only, never entry data.
//! Offsets it returns are absolute file offsets: a ZIP appended to an executable with offsets
//! relative to its own start (`cat prog archive.zip`) is detected and shifted.

use std::fs::File;
use std::io;

use super::format::*;
use crate::platform::read_exact_at;

/// Why a file's ZIP records could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ZipError {
    #[error("read failed: {0}")]
    Io(#[from] io::Error),
    #[error("truncated ZIP: {what} at offset {offset} runs past {limit}")]
    Truncated {
        what: &'static str,
        offset: u64,
        limit: u64,
    },
    #[error("corrupt ZIP: no {what} signature at offset {offset}")]
    BadSignature { what: &'static str, offset: u64 },
    #[error("corrupt ZIP: {0}")]
    Corrupt(String),
}

/// One entry of the central directory, with its data located.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The stored name (lossily decoded if it is not UTF-8).
    pub name: String,
    pub version_made_by: u16,
    pub flags: u16,
    pub method: u16,
    pub dos_time: u16,
    pub dos_date: u16,
    pub crc32: u32,
    pub compressed_size: u64,
    pub uncompressed_size: u64,
    pub external_attributes: u32,
    /// Absolute offset of the local file header.
    pub local_header_offset: u64,
    /// Absolute offset of the first data byte (after the local header's name and extra field).
    pub data_offset: u64,
}

impl Entry {
    pub fn is_stored(&self) -> bool {
        self.method == METHOD_STORED
    }
}

/// A ZIP found at the end of a file.
#[derive(Clone, Debug)]
pub struct Directory {
    pub entries: Vec<Entry>,
    /// Absolute offset of the central directory.
    pub central_directory_offset: u64,
    /// Where the archive begins: the lowest local header, or the central directory if empty.
    /// Everything before it (an executable, typically) is not part of the ZIP.
    pub archive_start: u64,
}

/// Reads the ZIP at the end of `file`; `Ok(None)` when the file does not end with an end of
/// central directory record (no ZIP at all, or one cut short).
pub fn read_directory(file: &File) -> Result<Option<Directory>, ZipError> {
    let file_len = file.metadata()?.len();
    let Some(end) = find_end(file, file_len)? else {
        return Ok(None);
    };
    let cd_end = end
        .cd_offset
        .checked_add(end.cd_size)
        .ok_or_else(|| ZipError::Corrupt("central directory size overflows".into()))?;
    // Offsets are relative to the archive's start; if the archive was appended to something
    // without adjusting them, the records sit `shift` bytes later than stated.
    let shift = end
        .records_start
        .checked_sub(cd_end)
        .ok_or(ZipError::Truncated {
            what: "central directory",
            offset: end.cd_offset,
            limit: end.records_start,
        })?;
    let cd_offset = end.cd_offset + shift;
    let cd_len = usize::try_from(end.cd_size)
        .map_err(|_| ZipError::Corrupt("central directory too large".into()))?;
    let mut cd = vec![0u8; cd_len];
    read_exact_at(file, &mut cd, cd_offset)?;
    let entries = parse_central_directory(file, &cd, end.count, shift, cd_offset)?;
    let archive_start = entries
        .iter()
        .map(|e| e.local_header_offset)
        .fold(cd_offset, u64::min);
    Ok(Some(Directory {
        entries,
        central_directory_offset: cd_offset,
        archive_start,
    }))
}

/// What the end records say, before any shift is applied.
struct EndRecords {
    count: u64,
    cd_size: u64,
    cd_offset: u64,
    /// Absolute offset of the first end record (the ZIP64 one when present).
    records_start: u64,
}

fn find_end(file: &File, file_len: u64) -> Result<Option<EndRecords>, ZipError> {
    if file_len < END_LEN as u64 {
        return Ok(None);
    }
    let tail_len = file_len.min((END_LEN + MAX_COMMENT_LEN) as u64) as usize;
    let tail_start = file_len - tail_len as u64;
    let mut tail = vec![0u8; tail_len];
    read_exact_at(file, &mut tail, tail_start)?;
    // The record must end exactly at the end of the file (its comment included): this rejects
    // a signature that merely occurs inside an executable or a model.
    let Some(at) = (0..=tail_len - END_LEN).rev().find(|&i| {
        u32_at(&tail, i) == END_SIG && i + END_LEN + usize::from(u16_at(&tail, i + 20)) == tail_len
    }) else {
        return Ok(None);
    };
    let end_offset = tail_start + at as u64;
    let record = &tail[at..at + END_LEN];
    let classic = EndRecords {
        count: u64::from(u16_at(record, 10)),
        cd_size: u64::from(u32_at(record, 12)),
        cd_offset: u64::from(u32_at(record, 16)),
        records_start: end_offset,
    };
    let Some(locator_offset) = end_offset.checked_sub(ZIP64_LOCATOR_LEN as u64) else {
        return Ok(Some(classic));
    };
    let mut locator = [0u8; ZIP64_LOCATOR_LEN];
    read_exact_at(file, &mut locator, locator_offset)?;
    if u32_at(&locator, 0) != ZIP64_LOCATOR_SIG {
        return Ok(Some(classic));
    }
    let zip64_offset = find_zip64_end(file, u64_at(&locator, 8), locator_offset)?;
    let mut record = [0u8; ZIP64_END_LEN];
    read_exact_at(file, &mut record, zip64_offset)?;
    Ok(Some(EndRecords {
        count: u64_at(&record, 32),
        cd_size: u64_at(&record, 40),
        cd_offset: u64_at(&record, 48),
        records_start: zip64_offset,
    }))
}

/// The ZIP64 end record is where the locator says, or (offsets relative to an appended
/// archive) immediately before the locator.
fn find_zip64_end(file: &File, stated: u64, locator_offset: u64) -> Result<u64, ZipError> {
    let has_signature = |offset: u64| -> Result<bool, ZipError> {
        if offset.saturating_add(ZIP64_END_LEN as u64) > locator_offset {
            return Ok(false);
        }
        let mut sig = [0u8; 4];
        read_exact_at(file, &mut sig, offset)?;
        Ok(u32_at(&sig, 0) == ZIP64_END_SIG)
    };
    if has_signature(stated)? {
        return Ok(stated);
    }
    if let Some(adjacent) = locator_offset.checked_sub(ZIP64_END_LEN as u64) {
        if has_signature(adjacent)? {
            return Ok(adjacent);
        }
    }
    Err(ZipError::BadSignature {
        what: "ZIP64 end of central directory",
        offset: stated,
    })
}

fn parse_central_directory(
    file: &File,
    cd: &[u8],
    count: u64,
    shift: u64,
    cd_offset: u64,
) -> Result<Vec<Entry>, ZipError> {
    let mut entries = Vec::new();
    let mut at = 0usize;
    for _ in 0..count {
        let record_offset = cd_offset + at as u64;
        let truncated = ZipError::Truncated {
            what: "central directory record",
            offset: record_offset,
            limit: cd_offset + cd.len() as u64,
        };
        if at + CENTRAL_HEADER_LEN > cd.len() {
            return Err(truncated);
        }
        let fixed = &cd[at..at + CENTRAL_HEADER_LEN];
        if u32_at(fixed, 0) != CENTRAL_HEADER_SIG {
            return Err(ZipError::BadSignature {
                what: "central directory record",
                offset: record_offset,
            });
        }
        let name_len = usize::from(u16_at(fixed, 28));
        let extra_len = usize::from(u16_at(fixed, 30));
        let comment_len = usize::from(u16_at(fixed, 32));
        let total = CENTRAL_HEADER_LEN + name_len + extra_len + comment_len;
        if at + total > cd.len() {
            return Err(truncated);
        }
        let name = &cd[at + CENTRAL_HEADER_LEN..at + CENTRAL_HEADER_LEN + name_len];
        let extra = &cd[at + CENTRAL_HEADER_LEN + name_len..][..extra_len];
        let mut sizes = Zip64Fields {
            uncompressed: u64::from(u32_at(fixed, 24)),
            compressed: u64::from(u32_at(fixed, 20)),
            local_header: u64::from(u32_at(fixed, 42)),
        };
        sizes.apply_extra(extra)?;
        let local_header_offset = sizes.local_header + shift;
        let data_offset = locate_data(file, local_header_offset, cd_offset)?;
        if data_offset.saturating_add(sizes.compressed) > cd_offset {
            return Err(ZipError::Truncated {
                what: "entry data",
                offset: data_offset,
                limit: cd_offset,
            });
        }
        entries.push(Entry {
            name: String::from_utf8_lossy(name).into_owned(),
            version_made_by: u16_at(fixed, 4),
            flags: u16_at(fixed, 8),
            method: u16_at(fixed, 10),
            dos_time: u16_at(fixed, 12),
            dos_date: u16_at(fixed, 14),
            crc32: u32_at(fixed, 16),
            compressed_size: sizes.compressed,
            uncompressed_size: sizes.uncompressed,
            external_attributes: u32_at(fixed, 38),
            local_header_offset,
            data_offset,
        });
        at += total;
    }
    Ok(entries)
}

/// The three central-directory fields that a ZIP64 extra block may widen.
struct Zip64Fields {
    uncompressed: u64,
    compressed: u64,
    local_header: u64,
}

impl Zip64Fields {
    /// Replaces each saturated field, in APPNOTE order, from the ZIP64 extra block.
    fn apply_extra(&mut self, mut extra: &[u8]) -> Result<(), ZipError> {
        while extra.len() >= 4 {
            let id = u16_at(extra, 0);
            let len = usize::from(u16_at(extra, 2));
            let body = extra
                .get(4..4 + len)
                .ok_or_else(|| ZipError::Corrupt("extra field runs past its record".into()))?;
            if id == ZIP64_EXTRA_ID {
                let mut values = body.chunks_exact(8).map(|c| u64_at(c, 0));
                for field in [
                    &mut self.uncompressed,
                    &mut self.compressed,
                    &mut self.local_header,
                ] {
                    if *field == u64::from(SATURATED_U32) {
                        *field = values.next().ok_or_else(|| {
                            ZipError::Corrupt("ZIP64 extra field is missing a value".into())
                        })?;
                    }
                }
                return Ok(());
            }
            extra = &extra[4 + len..];
        }
        Ok(())
    }
}

/// Reads the local header at `offset` and returns where its data starts.
fn locate_data(file: &File, offset: u64, cd_offset: u64) -> Result<u64, ZipError> {
    if offset.saturating_add(LOCAL_HEADER_LEN as u64) > cd_offset {
        return Err(ZipError::Truncated {
            what: "local header",
            offset,
            limit: cd_offset,
        });
    }
    let mut header = [0u8; LOCAL_HEADER_LEN];
    read_exact_at(file, &mut header, offset)?;
    if u32_at(&header, 0) != LOCAL_HEADER_SIG {
        return Err(ZipError::BadSignature {
            what: "local header",
            offset,
        });
    }
    let name_len = u64::from(u16_at(&header, 26));
    let extra_len = u64::from(u16_at(&header, 28));
    Ok(offset + LOCAL_HEADER_LEN as u64 + name_len + extra_len)
}
