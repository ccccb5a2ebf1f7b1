//! The PKZIP record layouts we read and write (APPNOTE 6.3): signatures, fixed sizes, the
//! ZIP64 markers, and little-endian field access.
//!
//! Owns only constants and byte-level helpers. Finding and walking the records is
//! [`super::directory`]'s job; writing them is `tools/zipalign`'s.

/// Local file header: 30 fixed bytes, then name and extra field.
pub const LOCAL_HEADER_SIG: u32 = 0x0403_4b50;
pub const LOCAL_HEADER_LEN: usize = 30;

/// Central directory file header: 46 fixed bytes, then name, extra field and comment.
pub const CENTRAL_HEADER_SIG: u32 = 0x0201_4b50;
pub const CENTRAL_HEADER_LEN: usize = 46;

/// End of central directory record: 22 fixed bytes, then a comment of up to 65535 bytes.
pub const END_SIG: u32 = 0x0605_4b50;
pub const END_LEN: usize = 22;
pub const MAX_COMMENT_LEN: usize = 0xffff;

/// ZIP64 end of central directory locator: 20 bytes, just before the end record.
pub const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;
pub const ZIP64_LOCATOR_LEN: usize = 20;

/// ZIP64 end of central directory record: 56 fixed bytes (version 1, no extensible data).
pub const ZIP64_END_SIG: u32 = 0x0606_4b50;
pub const ZIP64_END_LEN: usize = 56;

/// Extra-field id of the ZIP64 extended information block.
pub const ZIP64_EXTRA_ID: u16 = 0x0001;

/// A 32-bit size or offset of this value means "see the ZIP64 extra field".
pub const SATURATED_U32: u32 = 0xffff_ffff;
pub const SATURATED_U16: u16 = 0xffff;

/// Compression method 0: stored, the only one whose data can be mapped in place.
pub const METHOD_STORED: u16 = 0;

/// General-purpose flag bit 3: sizes and CRC follow the data in a data descriptor.
pub const FLAG_DATA_DESCRIPTOR: u16 = 1 << 3;
/// General-purpose flag bit 11: the name is UTF-8.
pub const FLAG_UTF8: u16 = 1 << 11;

/// "Version needed to extract" for ZIP64 archives (4.5).
pub const VERSION_ZIP64: u16 = 45;
/// "Version made by" host byte for Unix, so external attributes carry a Unix mode.
pub const HOST_UNIX: u16 = 3 << 8;

pub fn u16_at(buf: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([buf[at], buf[at + 1]])
}

pub fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

pub fn u64_at(buf: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(bytes)
}
