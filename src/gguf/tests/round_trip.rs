//! Writer → reader round trips, accessors, and opening files and ranges of files.

use super::*;
use crate::gguf::{Array, GgufWriteError, ValueType};

fn every_value() -> Vec<(&'static str, Value)> {
    vec![
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60_000)),
        ("t.i16", Value::I16(-30_000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.f32", Value::F32(-1.25e-3)),
        ("t.bool", Value::Bool(true)),
        ("t.str", Value::Str("héllo ▁world".into())),
        ("t.u64", Value::U64(u64::MAX - 1)),
        ("t.i64", Value::I64(i64::MIN + 1)),
        ("t.f64", Value::F64(std::f64::consts::PI)),
        ("a.u8", vec![1u8, 2, 255].into()),
        ("a.i8", vec![-1i8, 0, 127].into()),
        ("a.u16", vec![1u16, 65535].into()),
        ("a.i16", vec![-32768i16, 5].into()),
        ("a.u32", vec![7u32, u32::MAX].into()),
        ("a.i32", vec![-7i32, i32::MAX].into()),
        ("a.f32", vec![0.5f32, -0.0, f32::INFINITY].into()),
        ("a.bool", vec![true, false, true].into()),
        ("a.str", vec!["", "a", "ß∂"].into()),
        ("a.u64", vec![u64::MAX].into()),
        ("a.i64", vec![i64::MIN, 3].into()),
        ("a.f64", vec![1e300f64, -2.0].into()),
        ("a.empty", Value::Array(Array::F32(vec![]))),
        (
            "a.nested",
            Value::Array(Array::Array(vec![
                vec![1i32, 2, 3].into(),
                vec!["x".to_string()].into(),
                Array::Array(vec![vec![true].into(), Array::Array(vec![])]),
                Array::Str(vec![]),
            ])),
        ),
    ]
}

#[test]
fn every_value_type_round_trips_in_order() {
    let mut w = GgufWriter::new();
    for (k, v) in every_value() {
        w.add_kv(k, v);
    }
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    let read: Vec<(String, Value)> = f
        .metadata()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let expected: Vec<(String, Value)> = every_value()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    assert_eq!(read, expected);
    assert_eq!(f.version(), 3);
    assert!(f.tensors().is_empty());
    for t in ValueType::ALL {
        assert_eq!(ValueType::from_id(t.id()), Some(t));
    }
    assert_eq!(ValueType::from_id(13), None);
}

#[test]
fn accessors_convert_what_fits() {
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", "qwen2")
        .add_kv("u8", 5u8)
        .add_kv("i64", 70_000i64)
        .add_kv("neg", -1i32)
        .add_kv("big", u64::MAX)
        .add_kv("f64", 0.25f64)
        .add_kv("flag", false)
        .add_kv("toks", vec!["a", "b"])
        .add_kv("ids", vec![3i32, -4])
        .add_kv("scores", vec![1.5f32]);
    let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(f.architecture(), Some("qwen2"));
    assert_eq!(f.get_u32("u8"), Some(5));
    assert_eq!(f.get_u32("i64"), Some(70_000));
    assert_eq!(f.get_u32("neg"), None);
    assert_eq!(f.get_i64("neg"), Some(-1));
    assert_eq!(f.get_u32("big"), None);
    assert_eq!(f.get_u64("big"), Some(u64::MAX));
    assert_eq!(f.get_f32("f64"), Some(0.25));
    assert_eq!(f.get_f32("u8"), None);
    assert_eq!(f.get_bool("flag"), Some(false));
    assert_eq!(f.get_str("u8"), None);
    assert_eq!(
        f.get_str_array("toks"),
        Some(&["a".to_string(), "b".to_string()][..])
    );
    assert_eq!(f.get_i32_array("ids"), Some(&[3, -4][..]));
    assert_eq!(f.get_f32_array("scores"), Some(&[1.5][..]));
    assert_eq!(f.get_f32_array("ids"), None);
    assert!(f.get("missing").is_none());
}

#[test]
fn tensors_round_trip_aligned_and_zero_copy() {
    for alignment in [1u32, 32, 64, 4096] {
        let mut w = sample_writer();
        if alignment != 32 {
            w = GgufWriter::with_alignment(alignment).unwrap();
            w.add_tensor("a", &[3], GgmlType::F32, f32_bytes(3))
                .unwrap();
            w.add_tensor("b", &[256, 2], GgmlType::Q4K, vec![9u8; 288])
                .unwrap();
            w.add_tensor("c", &[], GgmlType::F32, f32_bytes(1)).unwrap();
        }
        let f = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        assert_eq!(f.alignment(), u64::from(alignment));
        assert_eq!(f.data_offset() % f.alignment(), 0);
        for t in f.tensors() {
            assert_eq!(t.offset % f.alignment(), 0, "{}", t.name);
            let data = f.tensor_data(t);
            assert_eq!(data.len() as u64, t.n_bytes());
            let base = f.bytes().as_ptr() as usize;
            let at = data.as_ptr() as usize - base;
            assert_eq!(at as u64, f.data_offset() + t.offset, "zero copy");
        }
    }
    let f = GgufFile::from_bytes(sample_bytes()).unwrap();
    let q = f.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!((q.dims.as_slice(), q.ty), (&[32u64, 2][..], GgmlType::Q4_0));
    assert_eq!((q.n_elements(), q.n_bytes()), (64, 36));
    assert_eq!(f.tensor_data(q), &[7u8; 36][..]);
    let e = f.tensor("token_embd.weight").unwrap();
    assert_eq!(f.tensor_data(e), f32_bytes(12).as_slice());
    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "token_embd.weight",
            "blk.0.attn_q.weight",
            "output_norm.weight"
        ]
    );
    assert!(f.tensor("nope").is_none());
}

#[test]
fn version_2_is_read() {
    let mut bytes = sample_bytes();
    put_u32(&mut bytes, 4, 2);
    assert_eq!(GgufFile::from_bytes(bytes).unwrap().version(), 2);
}

#[test]
fn invalid_utf8_in_a_string_value_is_replaced() {
    let mut bytes = sample_bytes();
    let at = find(&bytes, b"hello");
    bytes[at] = 0xff;
    let f = GgufFile::from_bytes(bytes).unwrap();
    let toks = f.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(toks[1], "\u{fffd}ello");
}

#[test]
fn open_and_open_range_map_files() {
    let gguf = sample_bytes();
    let path = temp_path("plain.gguf");
    std::fs::write(&path, &gguf).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.bytes(), gguf.as_slice());
    assert_eq!(f.tensors().len(), 3);

    let mut zip_like = vec![0xaau8; 4096];
    zip_like.extend_from_slice(&gguf);
    zip_like.extend_from_slice(b"trailing central directory");
    let path2 = temp_path("inner.zip");
    std::fs::write(&path2, &zip_like).unwrap();
    let f = GgufFile::open_range(&path2, 4096, gguf.len() as u64).unwrap();
    assert_eq!(f.shared_bytes().start_in_backing(), 4096);
    let t = f.tensor("token_embd.weight").unwrap();
    assert_eq!(f.tensor_data(t), f32_bytes(12).as_slice());

    let err = GgufFile::open_range(&path2, 4096, zip_like.len() as u64).unwrap_err();
    assert!(matches!(err, GgufError::RangeOutsideFile { .. }), "{err}");
    assert!(err.to_string().contains("inner.zip"), "{err}");

    let mut shifted = vec![0u8; 16];
    shifted.extend_from_slice(&gguf);
    std::fs::write(&path2, &shifted).unwrap();
    let err = GgufFile::open_range(&path2, 16, gguf.len() as u64).unwrap_err();
    assert!(
        matches!(
            err,
            GgufError::MisalignedStart {
                offset: 16,
                alignment: 32,
                ..
            }
        ),
        "{err}"
    );
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(&path2).unwrap();
}

#[test]
fn writer_rejects_inconsistent_tensors_and_alignment() {
    let mut w = GgufWriter::new();
    let err = w
        .add_tensor("x", &[33], GgmlType::Q8_0, vec![0u8; 34])
        .err()
        .unwrap();
    assert!(matches!(err, GgufWriteError::SizeMismatch { .. }), "{err}");
    assert!(err.to_string().contains("'x'"), "{err}");
    w.add_tensor("x", &[2], GgmlType::F32, f32_bytes(2))
        .unwrap();
    let err = w
        .add_tensor("x", &[2], GgmlType::F32, f32_bytes(2))
        .err()
        .unwrap();
    assert!(matches!(err, GgufWriteError::DuplicateTensor(_)), "{err}");
    let err = w
        .add_tensor("y", &[1, 1, 1, 1, 1], GgmlType::F32, f32_bytes(1))
        .err()
        .unwrap();
    assert!(
        matches!(err, GgufWriteError::TooManyDims { n_dims: 5, .. }),
        "{err}"
    );
    assert!(GgufWriter::with_alignment(48).is_err());
    assert!(GgufWriter::with_alignment(0).is_err());
    w.add_kv("general.alignment", "wide");
    let err = w.to_bytes().unwrap_err();
    assert!(matches!(err, GgufWriteError::BadAlignment { .. }), "{err}");
}

#[test]
fn writer_writes_files_and_replaces_repeated_keys() {
    let mut w = sample_writer();
    w.add_kv("llama.block_count", 7u32);
    let path = temp_path("written.gguf");
    w.write_file(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.get_u32("llama.block_count"), Some(7));
    assert_eq!(
        f.metadata().nth(1).map(|(k, _)| k),
        Some("llama.block_count")
    );
    std::fs::remove_file(&path).unwrap();
    let err = w.write_file("/nonexistent-dir/x.gguf").unwrap_err();
    assert!(err.to_string().contains("/nonexistent-dir/x.gguf"), "{err}");
}
