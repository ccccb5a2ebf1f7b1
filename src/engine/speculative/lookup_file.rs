//! llama.cpp's n-gram cache files (`-lcs`, `-lcd`; written by `llama-lookup-create` and
//! `llama-lookup`): a sequence of records, each an n-gram (four little-endian i32 tokens, -1
//! after the last), a positive follower count N (i32), then N pairs of token and positive
//! count (i32 each). Nothing else: no header, no padding; the file ends after a whole record.
//! A repeated n-gram or follower keeps its first record, as llama.cpp's loader does. Files
//! come from anywhere, so a malformed one is refused with the offset of the first bad field.

use super::ngram_cache::{Followers, NgramCache, NGRAM_MAX};
use std::io::Write;
use std::path::Path;

/// Why a cache file was refused.
#[derive(Debug, thiserror::Error)]
pub enum LookupFileError {
    #[error("lookup cache {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("lookup cache {path}: offset {offset}: {what}")]
    Format {
        path: String,
        offset: usize,
        what: String,
    },
}

/// A little-endian i32 reader that knows its offset.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn i32(&mut self, field: &str) -> Result<i32, (usize, String)> {
        let b = self
            .bytes
            .get(self.at..self.at + 4)
            .ok_or_else(|| (self.at, format!("the file ends inside a record ({field})")))?;
        self.at += 4;
        Ok(i32::from_le_bytes(b.try_into().expect("4 bytes")))
    }
}

/// Parses a cache file's bytes; `Err((offset, what))` names the first bad field.
pub fn parse(bytes: &[u8]) -> Result<NgramCache, (usize, String)> {
    let mut r = Reader { bytes, at: 0 };
    let mut cache = NgramCache::new();
    while r.at < bytes.len() {
        let mut g = [0i32; NGRAM_MAX];
        for t in g.iter_mut() {
            *t = r.i32("n-gram")?;
        }
        let at = r.at;
        let n = r.i32("follower count")?;
        if n <= 0 {
            return Err((at, format!("follower count {n}, expected at least 1")));
        }
        // Each follower takes 8 bytes: a count beyond the file is refused before allocating.
        if (n as usize).saturating_mul(8) > bytes.len() - r.at {
            return Err((
                at,
                format!("follower count {n} runs past the end of the file"),
            ));
        }
        let mut part = Followers::new();
        for _ in 0..n {
            let token = r.i32("token")?;
            let at = r.at;
            let count = r.i32("count")?;
            if count <= 0 {
                return Err((
                    at,
                    format!("count {count} for token {token}, expected at least 1"),
                ));
            }
            part.entry(token).or_insert(count);
        }
        cache.entry(g).or_insert(part);
    }
    Ok(cache)
}

/// Loads the cache file at `path`.
pub fn load(path: &Path) -> Result<NgramCache, LookupFileError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| LookupFileError::Io {
        path: name.clone(),
        source,
    })?;
    parse(&bytes).map_err(|(offset, what)| LookupFileError::Format {
        path: name,
        offset,
        what,
    })
}

/// The bytes of `cache` in the file format (n-grams and followers in ascending order, so the
/// same cache always gives the same file).
pub fn to_bytes(cache: &NgramCache) -> Vec<u8> {
    let mut grams: Vec<_> = cache.iter().filter(|(_, p)| !p.is_empty()).collect();
    grams.sort_by_key(|(g, _)| **g);
    let mut out = Vec::new();
    for (g, part) in grams {
        for t in g {
            out.extend_from_slice(&t.to_le_bytes());
        }
        out.extend_from_slice(&(part.len() as i32).to_le_bytes());
        for (t, c) in part {
            out.extend_from_slice(&t.to_le_bytes());
            out.extend_from_slice(&c.to_le_bytes());
        }
    }
    out
}

/// Writes `cache` to `path` (through a temporary file beside it, so a failed write leaves the
/// old file).
pub fn save(cache: &NgramCache, path: &Path) -> Result<(), LookupFileError> {
    let io = |source| LookupFileError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(&to_bytes(cache)).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::speculative::ngram_cache::update;

    #[test]
    fn round_trip_and_first_record_wins() {
        let mut c = NgramCache::new();
        update(&mut c, 1..=4, &[5, 6, 7, 5, 6, 8], 6);
        let bytes = to_bytes(&c);
        assert_eq!(parse(&bytes).unwrap(), c);
        let mut twice = bytes.clone();
        twice.extend_from_slice(&bytes);
        assert_eq!(parse(&twice).unwrap(), c);
        assert!(parse(&[]).unwrap().is_empty());
    }

    #[test]
    fn bad_files_name_the_offset() {
        let mut c = NgramCache::new();
        update(&mut c, 2..=2, &[5, 6, 7], 3);
        let good = to_bytes(&c);
        assert_eq!(good.len(), 28);
        let err = |b: &[u8]| parse(b).unwrap_err();
        assert_eq!(err(&good[..27]).0, 16);
        assert_eq!(err(&good[..10]).0, 8);
        let mut zero = good.clone();
        zero[16..20].copy_from_slice(&0i32.to_le_bytes());
        assert_eq!(
            err(&zero),
            (16, "follower count 0, expected at least 1".into())
        );
        let mut huge = good.clone();
        huge[16..20].copy_from_slice(&i32::MAX.to_le_bytes());
        assert_eq!(err(&huge).0, 16);
        let mut neg = good;
        neg[24..28].copy_from_slice(&(-3i32).to_le_bytes());
        assert_eq!(err(&neg).0, 24);
    }
}
