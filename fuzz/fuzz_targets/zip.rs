//! The bundle's ZIP reading (the end records, ZIP64, the central directory, local headers) on
//! arbitrary bytes, as a llamafile's own executable would be read, then what start-up does with
//! the entries: `.args` read whole and parsed, GGUF entries located for mapping.

#![no_main]

use std::io::Write;
use std::path::PathBuf;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use llamafile::args::parse_args_file;
use llamafile::bundle::Bundle;

/// Where each input is written for the reader.
static FILE: LazyLock<PathBuf> = LazyLock::new(|| {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("llamafile-fuzz-zip-{}", std::process::id()))
});

fuzz_target!(|data: &[u8]| {
    // The reader takes a file, as the running executable is one; each fuzzing process has its
    // own. In memory (tmpfs) where there is one: on a disk file system, rewriting the file for
    // every input spent most of the time flushing it to the disk.
    let path = FILE.as_path();
    let mut file = std::fs::File::create(path).expect("temp file");
    file.write_all(data).expect("temp file written");
    drop(file);
    if let Ok(Some(bundle)) = Bundle::open(path) {
        if let Ok(bytes) = bundle.read_small(".args") {
            let _ = parse_args_file(&String::from_utf8_lossy(&bytes));
        }
        let names: Vec<String> = bundle.gguf_entries().map(|e| e.name.clone()).collect();
        for name in names {
            if let Ok(location) = bundle.locate(&name) {
                assert!(location.offset + location.len <= data.len() as u64);
            }
        }
    }
});
