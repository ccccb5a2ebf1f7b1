//! Encoding the PKZIP records we write (zipalign, `--upgrade-engine`): local headers and
//! central directory records that always carry a ZIP64 extra block, and the ZIP64 end record,
//! locator and classic end record. Layouts and signatures come from [`super::format`], shared
//! with the reader.

use super::format::*;
use super::Entry;
use crate::calendar::civil_from_days;

/// ZIP64 extra block in a local header: id, length, uncompressed and compressed size.
const LOCAL_ZIP64_EXTRA_LEN: usize = 4 + 8 + 8;
/// ZIP64 extra block in a central record: the same plus the local header offset.
const CENTRAL_ZIP64_EXTRA_LEN: usize = 4 + 8 + 8 + 8;

/// Size of the local header written for an entry named `name`.
pub fn local_header_len(name: &str) -> u64 {
    (LOCAL_HEADER_LEN + name.len() + LOCAL_ZIP64_EXTRA_LEN) as u64
}

/// The local header of `entry`; sizes live in the ZIP64 extra block, no data descriptor.
pub fn local_header(entry: &Entry) -> Vec<u8> {
    let mut out = Vec::with_capacity(local_header_len(&entry.name) as usize);
    put32(&mut out, LOCAL_HEADER_SIG);
    put16(&mut out, VERSION_ZIP64);
    put16(&mut out, entry.flags & !FLAG_DATA_DESCRIPTOR);
    put16(&mut out, entry.method);
    put16(&mut out, entry.dos_time);
    put16(&mut out, entry.dos_date);
    put32(&mut out, entry.crc32);
    put32(&mut out, SATURATED_U32);
    put32(&mut out, SATURATED_U32);
    put16(&mut out, name_len(entry));
    put16(&mut out, LOCAL_ZIP64_EXTRA_LEN as u16);
    out.extend_from_slice(entry.name.as_bytes());
    put16(&mut out, ZIP64_EXTRA_ID);
    put16(&mut out, (LOCAL_ZIP64_EXTRA_LEN - 4) as u16);
    put64(&mut out, entry.uncompressed_size);
    put64(&mut out, entry.compressed_size);
    out
}

/// The central directory record of `entry`; sizes and offset in the ZIP64 extra block.
pub fn central_header(entry: &Entry) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(CENTRAL_HEADER_LEN + entry.name.len() + CENTRAL_ZIP64_EXTRA_LEN);
    put32(&mut out, CENTRAL_HEADER_SIG);
    put16(&mut out, entry.version_made_by);
    put16(&mut out, VERSION_ZIP64);
    put16(&mut out, entry.flags & !FLAG_DATA_DESCRIPTOR);
    put16(&mut out, entry.method);
    put16(&mut out, entry.dos_time);
    put16(&mut out, entry.dos_date);
    put32(&mut out, entry.crc32);
    put32(&mut out, SATURATED_U32);
    put32(&mut out, SATURATED_U32);
    put16(&mut out, name_len(entry));
    put16(&mut out, CENTRAL_ZIP64_EXTRA_LEN as u16);
    put16(&mut out, 0); // comment length
    put16(&mut out, 0); // disk number
    put16(&mut out, 0); // internal attributes
    put32(&mut out, entry.external_attributes);
    put32(&mut out, SATURATED_U32);
    out.extend_from_slice(entry.name.as_bytes());
    put16(&mut out, ZIP64_EXTRA_ID);
    put16(&mut out, (CENTRAL_ZIP64_EXTRA_LEN - 4) as u16);
    put64(&mut out, entry.uncompressed_size);
    put64(&mut out, entry.compressed_size);
    put64(&mut out, entry.local_header_offset);
    out
}

/// ZIP64 end record, its locator, and the classic end record, for a central directory of
/// `count` records and `size` bytes at `offset`; the end records start at `offset + size`.
pub fn end_records(count: u64, offset: u64, size: u64) -> Vec<u8> {
    let zip64_end_offset = offset + size;
    let mut out = Vec::with_capacity(ZIP64_END_LEN + ZIP64_LOCATOR_LEN + END_LEN);
    put32(&mut out, ZIP64_END_SIG);
    put64(&mut out, (ZIP64_END_LEN - 12) as u64);
    put16(&mut out, HOST_UNIX | VERSION_ZIP64);
    put16(&mut out, VERSION_ZIP64);
    put32(&mut out, 0); // this disk
    put32(&mut out, 0); // disk with the central directory
    put64(&mut out, count);
    put64(&mut out, count);
    put64(&mut out, size);
    put64(&mut out, offset);

    put32(&mut out, ZIP64_LOCATOR_SIG);
    put32(&mut out, 0); // disk with the ZIP64 end record
    put64(&mut out, zip64_end_offset);
    put32(&mut out, 1); // total disks

    let count16 = u16::try_from(count).unwrap_or(SATURATED_U16);
    put32(&mut out, END_SIG);
    put16(&mut out, 0);
    put16(&mut out, 0);
    put16(&mut out, count16);
    put16(&mut out, count16);
    put32(&mut out, u32::try_from(size).unwrap_or(SATURATED_U32));
    put32(&mut out, SATURATED_U32); // offset: see the ZIP64 end record
    put16(&mut out, 0); // comment length
    out
}

/// DOS time and date fields for `unix_seconds`, in UTC, clamped to 1980..=2107.
pub fn dos_time_date(unix_seconds: i64) -> (u16, u16) {
    let days = unix_seconds.div_euclid(86_400);
    let secs = unix_seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    if year < 1980 {
        return (0, (1 << 5) | 1);
    }
    if year > 2107 {
        return ((23 << 11) | (59 << 5) | 29, (127 << 9) | (12 << 5) | 31);
    }
    let time = ((secs / 3600) << 11) | ((secs / 60 % 60) << 5) | ((secs % 60) / 2);
    let date = ((year - 1980) << 9) | (month << 5) | day;
    (time as u16, date as u16)
}

fn name_len(entry: &Entry) -> u16 {
    u16::try_from(entry.name.len()).expect("entry names are checked to fit 16 bits")
}

fn put16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dos_time_of_known_instants() {
        // 2023-11-14 22:13:20 UTC
        let (time, date) = dos_time_date(1_700_000_000);
        assert_eq!(date, ((2023 - 1980) << 9) | (11 << 5) | 14);
        assert_eq!(time, (22 << 11) | (13 << 5) | 10);
        // 2000-02-29 00:00:59 UTC (leap day)
        let (time, date) = dos_time_date(951_782_459);
        assert_eq!(date, (20 << 9) | (2 << 5) | 29);
        assert_eq!(time, 29);
        assert_eq!(dos_time_date(0), (0, (1 << 5) | 1));
    }

    #[test]
    fn record_sizes_match_their_length_fields() {
        let entry = Entry {
            name: "model.gguf".into(),
            version_made_by: HOST_UNIX | VERSION_ZIP64,
            flags: FLAG_UTF8 | FLAG_DATA_DESCRIPTOR,
            method: METHOD_STORED,
            dos_time: 1,
            dos_date: 2,
            crc32: 3,
            compressed_size: 5 << 32,
            uncompressed_size: 5 << 32,
            external_attributes: 0o100644 << 16,
            local_header_offset: 7 << 32,
            data_offset: 0,
        };
        let local = local_header(&entry);
        assert_eq!(local.len() as u64, local_header_len("model.gguf"));
        assert_eq!(u16_at(&local, 6), FLAG_UTF8, "no data descriptor");
        assert_eq!(u64_at(&local, local.len() - 16), 5 << 32);
        let central = central_header(&entry);
        assert_eq!(
            central.len(),
            CENTRAL_HEADER_LEN + 10 + CENTRAL_ZIP64_EXTRA_LEN
        );
        assert_eq!(u64_at(&central, central.len() - 8), 7 << 32);
        let end = end_records(70_000, 1 << 33, 1000);
        assert_eq!(end.len(), ZIP64_END_LEN + ZIP64_LOCATOR_LEN + END_LEN);
        assert_eq!(u64_at(&end, ZIP64_END_LEN + 8), (1 << 33) + 1000);
        assert_eq!(
            u16_at(&end, end.len() - 12),
            SATURATED_U16,
            "count over 16 bits"
        );
    }
}
