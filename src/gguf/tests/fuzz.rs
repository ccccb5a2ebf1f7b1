//! Malformed input must give an error, never a panic, hang or huge allocation: truncate a valid
//! file at every byte and flip random bytes (fixed-seed LCG, so failures reproduce).

use super::*;

/// Parses `bytes` and, if that works, touches everything the file hands out.
fn parse_and_touch(bytes: Vec<u8>) -> bool {
    match GgufFile::from_bytes(bytes) {
        Ok(f) => {
            for t in f.tensors() {
                assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes());
            }
            let _ = (f.architecture(), f.get_str_array("tokenizer.ggml.tokens"));
            let _ = f.metadata().count();
            true
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

/// A file with every kind of section: strings, numeric arrays, nested arrays, tensors.
fn fuzz_seed_file() -> Vec<u8> {
    let mut w = sample_writer();
    w.add_kv("general.alignment", 64u32)
        .add_kv("f64", 1.0f64)
        .add_kv("bools", vec![true, false]);
    w.to_bytes().unwrap()
}

#[test]
fn truncation_at_every_byte_fails_cleanly() {
    let bytes = fuzz_seed_file();
    let full = GgufFile::from_bytes(bytes.clone()).unwrap();
    let last = full.tensors().last().unwrap();
    let data_end = (full.data_offset() + last.offset + last.n_bytes()) as usize;
    for n in 0..bytes.len() {
        let parsed = parse_and_touch(bytes[..n].to_vec());
        assert_eq!(parsed, n >= data_end, "truncated to {n} bytes");
    }
}

/// Knuth's MMIX linear congruential generator; the high bits are the usable ones.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[test]
fn random_byte_flips_never_panic() {
    let bytes = fuzz_seed_file();
    let mut rng = Lcg(0x5eed);
    let (mut ok, mut failed) = (0, 0);
    for _ in 0..4000 {
        let mut b = bytes.clone();
        for _ in 0..1 + rng.next() % 4 {
            let at = (rng.next() % b.len() as u64) as usize;
            b[at] = match rng.next() % 3 {
                0 => rng.next() as u8,
                1 => 0xff,
                _ => b[at] ^ (1 << (rng.next() % 8)),
            };
        }
        if parse_and_touch(b) {
            ok += 1;
        } else {
            failed += 1;
        }
    }
    // Both outcomes must occur, or the flips are not reaching the parser.
    assert!(ok > 0 && failed > 0, "ok {ok}, failed {failed}");
}
