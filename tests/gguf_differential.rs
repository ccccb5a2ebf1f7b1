//! Our GGUF reader against llama.cpp's own Python reader (the `gguf` package) on the four test
//! models: the same version, alignment, data offset, metadata (keys in file order, types, values)
//! and tensor infos (names, types, dimensions, absolute offsets). `tools/gguf-dump.py` prints what
//! the Python reader sees.

mod common;

use std::path::Path;
use std::process::Command;

use common::{model_path, MODELS};
use llamafile::gguf::{Array, GgufFile, Value};
use serde_json::{json, Value as Json};

/// The Python reader's view of `path`, or `None` (after saying so) when Python's `gguf` package is
/// missing and CI does not demand it.
fn python_view(path: &Path) -> Option<Json> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/gguf-dump.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(path)
        .output()
        .expect("python3 runs");
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let missing = stderr.contains("No module named 'gguf'");
        if missing && std::env::var("LLAMAFILE_REQUIRE_MODELS").as_deref() != Ok("1") {
            eprintln!("skipping: Python's gguf package is not installed (pip install gguf)");
            return None;
        }
        panic!(
            "{} failed on {}: {stderr}",
            script.display(),
            path.display()
        );
    }
    Some(serde_json::from_slice(&out.stdout).expect("gguf-dump.py prints JSON"))
}

/// A float as the Python side writes it: a number, or `repr` text for values JSON cannot carry.
fn float(v: f64) -> Json {
    if v.is_finite() {
        json!(v)
    } else if v.is_nan() {
        json!("nan")
    } else if v > 0.0 {
        json!("inf")
    } else {
        json!("-inf")
    }
}

fn array_json(a: &Array) -> Json {
    match a {
        Array::U8(v) => json!(v),
        Array::I8(v) => json!(v),
        Array::U16(v) => json!(v),
        Array::I16(v) => json!(v),
        Array::U32(v) => json!(v),
        Array::I32(v) => json!(v),
        Array::F32(v) => Json::Array(v.iter().map(|&x| float(x.into())).collect()),
        Array::Bool(v) => json!(v),
        Array::Str(v) => json!(v),
        Array::Array(v) => Json::Array(v.iter().map(array_json).collect()),
        Array::U64(v) => json!(v),
        Array::I64(v) => json!(v),
        Array::F64(v) => Json::Array(v.iter().map(|&x| float(x)).collect()),
    }
}

fn value_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::F32(x) => float((*x).into()),
        Value::Bool(x) => json!(x),
        Value::Str(x) => json!(x),
        Value::Array(a) => array_json(a),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F64(x) => float(*x),
    }
}

/// Type ids as the Python reader lists them: the value's type, then for an array its element type.
fn type_ids(v: &Value) -> Vec<u32> {
    let mut ids = vec![v.value_type().id()];
    if let Value::Array(a) = v {
        ids.push(a.elem_type().id());
    }
    ids
}

fn ours(file: &GgufFile) -> Json {
    let metadata: Vec<Json> = file
        .metadata()
        .map(|(key, value)| json!({"key": key, "types": type_ids(value), "value": value_json(value)}))
        .collect();
    let tensors: Vec<Json> = file
        .tensors()
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "type": t.ty.id(),
                "dims": t.dims,
                "offset": file.data_offset() + t.offset,
            })
        })
        .collect();
    json!({
        "version": file.version(),
        "alignment": file.alignment(),
        "data_offset": file.data_offset(),
        "metadata": metadata,
        "tensors": tensors,
    })
}

/// Names the first place two views part, so a failure says where rather than dumping megabytes.
fn first_difference(path: &str, a: &Json, b: &Json) -> Option<String> {
    match (a, b) {
        (Json::Object(x), Json::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) => {
                        if let Some(d) = first_difference(&format!("{path}.{k}"), v, w) {
                            return Some(d);
                        }
                    }
                    None => return Some(format!("{path}.{k}: only ours has it")),
                }
            }
            y.keys()
                .find(|k| !x.contains_key(*k))
                .map(|k| format!("{path}.{k}: only Python's has it"))
        }
        (Json::Array(x), Json::Array(y)) => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                let label = v
                    .get("key")
                    .or_else(|| v.get("name"))
                    .and_then(Json::as_str)
                    .map(|n| format!("{path}[{i}]({n})"))
                    .unwrap_or_else(|| format!("{path}[{i}]"));
                if let Some(d) = first_difference(&label, v, w) {
                    return Some(d);
                }
            }
            (x.len() != y.len())
                .then(|| format!("{path}: {} entries here, {} in Python's", x.len(), y.len()))
        }
        (Json::Number(x), Json::Number(y)) if x.as_f64() == y.as_f64() => None,
        _ if a == b => None,
        _ => Some(format!("{path}: ours {a}, Python's {b}")),
    }
}

#[test]
fn every_test_model_reads_as_the_gguf_package_reads_it() {
    for (stem, _) in MODELS {
        let Some(path) = model_path(stem) else {
            continue;
        };
        let Some(theirs) = python_view(&path) else {
            return;
        };
        let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{stem}: {e}"));
        let ours = ours(&file);
        if let Some(d) = first_difference(stem, &ours, &theirs) {
            panic!("our GGUF reader parts from the gguf package at {d}");
        }
        let n = theirs["tensors"].as_array().map_or(0, Vec::len);
        assert!(n > 0, "{stem}: no tensors compared");
        eprintln!("{stem}: same as the gguf package ({n} tensors)");
    }
}
