//! One test per malformed case: the error variant, and a message naming what and where.

use super::*;
use crate::gguf::{Array, MAX_ARRAY_DEPTH};

/// Asserts the message of `err` mentions every one of `needles`.
fn says(err: &GgufError, needles: &[&str]) {
    let msg = err.to_string();
    assert!(!msg.contains('\n'), "one line: {msg}");
    for n in needles {
        assert!(msg.contains(n), "{msg:?} should mention {n:?}");
    }
}

#[test]
fn bad_magic_shows_the_bytes_found() {
    let mut bytes = sample_bytes();
    bytes[..4].copy_from_slice(b"GGML");
    let err = parse_err(bytes);
    assert!(matches!(err, GgufError::BadMagic { found } if &found == b"GGML"));
    says(&err, &["47, 47, 4d, 4c", "offset 0"]);
}

#[test]
fn versions_other_than_2_and_3_are_rejected() {
    for version in [0, 1, 4, u32::MAX] {
        let mut bytes = sample_bytes();
        put_u32(&mut bytes, 4, version);
        let err = parse_err(bytes);
        assert!(matches!(err, GgufError::UnsupportedVersion { version: v } if v == version));
        says(&err, &[&format!("version {version}")]);
    }
}

#[test]
fn truncated_header() {
    let err = parse_err(sample_bytes()[..12].to_vec());
    assert!(matches!(
        err,
        GgufError::Truncated {
            offset: 8,
            needed: 8,
            size: 12,
            ..
        }
    ));
    says(&err, &["tensor count", "offset 8"]);
    assert!(matches!(
        parse_err(vec![]),
        GgufError::Truncated { offset: 0, .. }
    ));
}

#[test]
fn truncated_string() {
    // Cut the file five bytes into the last tensor's name.
    let bytes = sample_bytes();
    let at = find(&bytes, b"output_norm.weight") - 8;
    let err = parse_err(bytes[..at + 8 + 5].to_vec());
    assert!(matches!(
        err,
        GgufError::StringTooLong { len: 18, remaining: 5, offset, .. } if offset == at as u64
    ));
    says(
        &err,
        &["name of tensor #2", &format!("offset {at}"), "length 18"],
    );
}

#[test]
fn absurd_string_length() {
    let mut bytes = sample_bytes();
    let at = after(&bytes, "general.architecture") + 4;
    put_u64(&mut bytes, at, u64::MAX);
    let err = parse_err(bytes);
    assert!(matches!(
        err,
        GgufError::StringTooLong { len: u64::MAX, .. }
    ));
    says(&err, &["'general.architecture'", &format!("offset {at}")]);
}

#[test]
fn truncated_array() {
    let bytes = sample_bytes();
    let cut = after(&bytes, "hello");
    let err = parse_err(bytes[..cut].to_vec());
    assert!(matches!(err, GgufError::Truncated { needed: 8, .. }));
    says(&err, &["'tokenizer.ggml.tokens'", &format!("offset {cut}")]);
}

#[test]
fn absurd_array_length() {
    let mut bytes = sample_bytes();
    let at = after(&bytes, "tokenizer.ggml.scores") + 8;
    put_u64(&mut bytes, at, u64::MAX / 2);
    let err = parse_err(bytes);
    assert!(matches!(
        err,
        GgufError::ArrayTooLong {
            min_elem_bytes: 4,
            ..
        }
    ));
    says(&err, &["'tokenizer.ggml.scores'", &format!("offset {at}")]);
}

#[test]
fn absurd_tensor_and_key_counts() {
    for (at, what) in [(8, "tensor"), (16, "metadata key")] {
        let mut bytes = sample_bytes();
        put_u64(&mut bytes, at, u64::MAX);
        let err = parse_err(bytes);
        assert!(matches!(
            err,
            GgufError::CountTooLarge {
                count: u64::MAX,
                ..
            }
        ));
        says(&err, &[what, &format!("offset {at}")]);
    }
}

#[test]
fn unknown_metadata_value_type() {
    let mut bytes = sample_bytes();
    let at = after(&bytes, "llama.block_count");
    put_u32(&mut bytes, at, 99);
    let err = parse_err(bytes);
    assert!(matches!(
        err,
        GgufError::UnknownValueType { type_id: 99, .. }
    ));
    says(
        &err,
        &["'llama.block_count'", "99", &format!("offset {at}")],
    );

    let mut bytes = sample_bytes();
    let at = after(&bytes, "tokenizer.ggml.scores") + 4;
    put_u32(&mut bytes, at, 13);
    let err = parse_err(bytes);
    assert!(matches!(
        err,
        GgufError::UnknownValueType { type_id: 13, .. }
    ));
    says(&err, &["'tokenizer.ggml.scores'", &format!("offset {at}")]);
}

#[test]
fn arrays_nested_too_deep() {
    let nest = |levels: usize| {
        let mut a = Array::U8(vec![1]);
        for _ in 1..levels {
            a = Array::Array(vec![a]);
        }
        let mut w = GgufWriter::new();
        w.add_kv("deep", a);
        GgufFile::from_bytes(w.to_bytes().unwrap())
    };
    assert!(nest(MAX_ARRAY_DEPTH).is_ok());
    let err = nest(MAX_ARRAY_DEPTH + 1).unwrap_err();
    assert!(matches!(err, GgufError::ArrayTooDeep { .. }), "{err}");
    says(&err, &["'deep'", "offset"]);
}

#[test]
fn unknown_tensor_type() {
    let mut bytes = sample_bytes();
    let at = after(&bytes, "output_norm.weight") + 4 + 8;
    put_u32(&mut bytes, at, 99);
    let err = parse_err(bytes);
    assert!(matches!(
        err,
        GgufError::UnknownTensorType { type_id: 99, .. }
    ));
    says(
        &err,
        &["'output_norm.weight'", "99", &format!("offset {at}")],
    );
}

#[test]
fn too_many_dims() {
    let mut bytes = sample_bytes();
    let at = after(&bytes, "output_norm.weight");
    put_u32(&mut bytes, at, 5);
    let err = parse_err(bytes);
    assert!(matches!(err, GgufError::TooManyDims { n_dims: 5, .. }));
    says(&err, &["'output_norm.weight'", &format!("offset {at}")]);
}

#[test]
fn dims_whose_product_or_size_overflows() {
    for (d0, d1) in [(1u64 << 33, 1u64 << 33), (1 << 62, 2)] {
        let mut bytes = sample_bytes();
        let at = after(&bytes, "token_embd.weight") + 4;
        put_u64(&mut bytes, at, d0);
        put_u64(&mut bytes, at + 8, d1);
        let err = parse_err(bytes);
        assert!(matches!(err, GgufError::ShapeOverflow { .. }), "{err}");
        says(&err, &["'token_embd.weight'", &d0.to_string()]);
    }
}

#[test]
fn dims_not_whole_blocks() {
    let mut bytes = sample_bytes();
    let at = after(&bytes, "blk.0.attn_q.weight") + 4;
    put_u64(&mut bytes, at, 31);
    let err = parse_err(bytes);
    assert!(matches!(
        err,
        GgufError::NotWholeBlocks { n_elements: 62, .. }
    ));
    says(&err, &["'blk.0.attn_q.weight'", "q4_0", "62"]);
}

#[test]
fn tensor_data_past_the_end() {
    let bytes = sample_bytes();
    let size = bytes.len() - 30;
    let err = parse_err(bytes[..size].to_vec());
    assert!(matches!(err, GgufError::TensorPastEnd { .. }), "{err}");
    says(&err, &["'output_norm.weight'", &format!("{size} bytes")]);

    let mut bytes = sample_bytes();
    let at = after(&bytes, "output_norm.weight") + 4 + 8 + 4;
    put_u64(&mut bytes, at, u64::MAX - 31);
    let err = parse_err(bytes);
    assert!(matches!(err, GgufError::TensorPastEnd { end, .. } if end > u128::from(u64::MAX)));
    says(&err, &["'output_norm.weight'"]);
}

#[test]
fn misaligned_tensor_offset() {
    let mut bytes = sample_bytes();
    let at = after(&bytes, "output_norm.weight") + 4 + 8 + 4;
    let offset = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) + 4;
    put_u64(&mut bytes, at, offset);
    let err = parse_err(bytes);
    assert!(matches!(
        err,
        GgufError::MisalignedTensor { alignment: 32, .. }
    ));
    says(&err, &["'output_norm.weight'", &offset.to_string(), "32"]);
}

#[test]
fn duplicate_key() {
    let mut bytes = sample_bytes();
    let at = find(&bytes, b"dup.b");
    bytes[at + 4] = b'a';
    let err = parse_err(bytes);
    assert!(matches!(err, GgufError::DuplicateKey { .. }));
    says(&err, &["'dup.a'", &format!("offset {}", at - 8)]);
}

#[test]
fn duplicate_tensor_name() {
    let mut w = GgufWriter::new();
    w.add_tensor("t1", &[1], GgmlType::F32, f32_bytes(1))
        .unwrap();
    w.add_tensor("t2", &[1], GgmlType::F32, f32_bytes(1))
        .unwrap();
    let mut bytes = w.to_bytes().unwrap();
    let at = find(&bytes, b"t2");
    bytes[at + 1] = b'1';
    let err = parse_err(bytes);
    assert!(matches!(err, GgufError::DuplicateTensor { .. }));
    says(&err, &["'t1'", &format!("offset {}", at - 8)]);
}

#[test]
fn invalid_utf8_in_key_or_tensor_name() {
    let mut bytes = sample_bytes();
    let at = find(&bytes, b"dup.b");
    bytes[at] = 0xff;
    let err = parse_err(bytes);
    assert!(matches!(err, GgufError::InvalidUtf8 { .. }));
    says(&err, &["metadata key #3", &format!("offset {}", at - 8)]);

    let mut bytes = sample_bytes();
    let at = find(&bytes, b"blk.0");
    bytes[at] = 0xc0;
    let err = parse_err(bytes);
    assert!(matches!(err, GgufError::InvalidUtf8 { .. }));
    says(&err, &["tensor #1", &format!("offset {}", at - 8)]);
}

#[test]
fn alignment_not_a_power_of_two() {
    for bad in [0u32, 48] {
        let mut w = GgufWriter::with_alignment(64).unwrap();
        w.add_tensor("t", &[1], GgmlType::F32, f32_bytes(1))
            .unwrap();
        let mut bytes = w.to_bytes().unwrap();
        let at = after(&bytes, "general.alignment") + 4;
        put_u32(&mut bytes, at, bad);
        let err = parse_err(bytes);
        assert!(matches!(err, GgufError::BadAlignment { .. }));
        says(&err, &["general.alignment", &bad.to_string()]);
    }
}

#[test]
fn io_error_names_the_path() {
    let path = temp_path("does-not-exist.gguf");
    let err = GgufFile::open(&path).unwrap_err();
    assert!(matches!(err, GgufError::Io { .. }));
    says(&err, &[&path.display().to_string()]);
}
