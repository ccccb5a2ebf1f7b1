//! Why the GPU cannot be used ([`GpuUnavailable`], found while probing and opening it) and why
//! an operation on an open device failed ([`GpuError`]). Both are plain values with a one-line
//! message: a missing library, a missing symbol, or a CUDA error code is never a panic.

use thiserror::Error;

/// Why no GPU runs this process. The message is the text in parentheses of the start line,
/// "gpu: none (REASON); running on CPU".
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum GpuUnavailable {
    #[error("--gpu disable")]
    Disabled,
    #[error("CUDA_VISIBLE_DEVICES is empty: no device visible")]
    NoVisibleDevice,
    #[error("{0} not found")]
    LibraryNotFound(&'static str),
    #[error("{library} cannot be loaded: {detail}")]
    LibraryUnloadable {
        library: &'static str,
        detail: String,
    },
    #[error("{library} has no {symbol}: the NVIDIA driver is too old or not a CUDA driver")]
    MissingSymbol {
        library: &'static str,
        symbol: &'static str,
    },
    #[error("{0}")]
    Cuda(CudaFailure),
    #[error("no CUDA device found")]
    NoDevice,
    #[error("--main-gpu {index}: only {count} device(s) visible")]
    NoSuchDevice { index: usize, count: usize },
    #[error("the driver cannot load kernel module {module}: {failure}{}", log_suffix(.log))]
    Jit {
        module: &'static str,
        failure: CudaFailure,
        log: String,
    },
    #[error("CUDA is not available on this platform")]
    UnsupportedPlatform,
}

/// A failed CUDA driver call: which call, its error code and the driver's name for it.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error("{call} failed: {name} ({code})")]
pub struct CudaFailure {
    pub call: &'static str,
    pub code: i32,
    pub name: String,
}

/// Why an operation on an open device failed.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum GpuError {
    #[error("{0}")]
    Cuda(CudaFailure),
    #[error("kernel {0} is not in the loaded modules")]
    NoKernel(String),
    #[error("{what}: {got} bytes given, {want} expected")]
    Size {
        what: &'static str,
        got: usize,
        want: usize,
    },
}

impl From<CudaFailure> for GpuError {
    fn from(f: CudaFailure) -> GpuError {
        GpuError::Cuda(f)
    }
}

impl From<CudaFailure> for GpuUnavailable {
    fn from(f: CudaFailure) -> GpuUnavailable {
        GpuUnavailable::Cuda(f)
    }
}

/// The JIT log on the same line, its lines joined, when there is one.
fn log_suffix(log: &str) -> String {
    let joined: Vec<&str> = log
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if joined.is_empty() {
        String::new()
    } else {
        format!(": {}", joined.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jit_failure_names_the_module_and_carries_the_log_on_one_line() {
        let e = GpuUnavailable::Jit {
            module: "attention",
            failure: CudaFailure {
                call: "cuModuleLoadDataEx",
                code: 218,
                name: "CUDA_ERROR_INVALID_PTX".into(),
            },
            log: "ptxas fatal: bad\n\nline 2\n".into(),
        };
        let text = e.to_string();
        assert_eq!(
            text,
            "the driver cannot load kernel module attention: cuModuleLoadDataEx failed: \
             CUDA_ERROR_INVALID_PTX (218): ptxas fatal: bad; line 2"
        );
        assert!(!text.contains('\n'));
    }
}
