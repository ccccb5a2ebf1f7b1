//! The kernels carried by the binary: every `gpu-src/*.cu` (and the headers they include) as
//! source, for `--recompile`, and as the PTX `tools/build-ptx.py` made of it for compute_75,
//! which the driver JIT-compiles for whatever GPU it finds. A test checks that this list is
//! exactly the files in `gpu-src/`, so a new kernel file cannot be left out.

/// One kernel module: a `.cu` file, its source and its committed PTX.
#[derive(Clone, Copy, Debug)]
pub struct KernelModule {
    /// The file's stem (`attention` for `gpu-src/attention.cu`).
    pub name: &'static str,
    pub source: &'static str,
    pub ptx: &'static str,
}

macro_rules! modules {
    ($($name:literal),* $(,)?) => {
        /// Every kernel module, in file-name order.
        pub const MODULES: &[KernelModule] = &[$(
            KernelModule {
                name: $name,
                source: include_str!(concat!("../../gpu-src/", $name, ".cu")),
                ptx: include_str!(concat!("../../gpu-src/ptx/", $name, ".ptx")),
            },
        )*];
    };
}

modules!(
    "activation",
    "attention",
    "elementwise",
    "embed",
    "kv_cache",
    "logits",
    "matmul",
    "matvec",
    "norm",
    "rope",
);

/// The headers the modules include, by the name they are included as.
pub const HEADERS: &[(&str, &str)] = &[
    ("common.cuh", include_str!("../../gpu-src/common.cuh")),
    ("quant.cuh", include_str!("../../gpu-src/quant.cuh")),
];

/// The options every module is compiled with (tools/build-ptx.py's, less the architecture).
pub const COMPILE_OPTIONS: &[&str] = &["--std=c++17", "--fmad=true"];

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn stems(ext: &str) -> Vec<String> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("gpu-src");
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(ext).map(str::to_string)
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn every_source_file_is_embedded_with_its_ptx() {
        let names: Vec<&str> = MODULES.iter().map(|m| m.name).collect();
        assert_eq!(names, stems(".cu"));
        let headers: Vec<String> = HEADERS.iter().map(|h| h.0.replace(".cuh", "")).collect();
        assert_eq!(headers, stems(".cuh"));
        for m in MODULES {
            assert!(
                m.ptx.contains(".target sm_75"),
                "{}: not compute_75 PTX",
                m.name
            );
            assert!(m.ptx.contains(".entry"), "{}: no kernel in the PTX", m.name);
        }
    }

    #[test]
    fn the_build_script_uses_the_same_options() {
        let script = include_str!("../../tools/build-ptx.py");
        for o in COMPILE_OPTIONS {
            assert!(
                script.contains(&format!("\"{o}\"")),
                "{o} not in build-ptx.py"
            );
        }
    }

    /// quant.cuh's FOR_EACH_WEIGHT_TYPE suffixes.
    const WEIGHT_TYPES: [&str; 9] = [
        "f32", "f16", "q4_0", "q4_1", "q5_0", "q8_0", "q4_k", "q5_k", "q6_k",
    ];

    /// Every kernel a header comment documents is in the PTX, and the other way round: the
    /// documented ABI is the one shipped.
    #[test]
    fn documented_kernels_are_the_compiled_ones() {
        for m in MODULES {
            let mut entries: Vec<String> = m
                .ptx
                .lines()
                .filter_map(|l| l.trim().strip_prefix(".visible .entry "))
                .map(|l| l.split('(').next().unwrap().trim().to_string())
                .collect();
            entries.sort();
            let header: String = m
                .source
                .lines()
                .take_while(|l| l.starts_with("//"))
                .collect();
            for e in &entries {
                let documented = header.contains(&format!("{e}("))
                    || WEIGHT_TYPES.iter().any(|t| {
                        e.strip_suffix(t)
                            .and_then(|s| s.strip_suffix('_'))
                            .is_some_and(|stem| header.contains(&format!("{stem}_<type>(")))
                    });
                assert!(documented, "{}: kernel {e} has no ABI comment", m.name);
            }
            assert!(!entries.is_empty(), "{}", m.name);
        }
    }
}
