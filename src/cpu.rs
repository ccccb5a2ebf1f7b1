//! The one authority on CPU instruction sets: which variants this CPU can run, and the one
//! every kernel uses (matrix products, attention, norms, RoPE, activations, `expf`, f16
//! conversion), chosen once per process. `LLAMAFILE_CPU=scalar|avx2|avx512` (x86-64) or
//! `scalar|neon|dotprod` (aarch64) forces a variant; unset, empty or `auto` takes the best.
//!
//! Kernels take an explicit [`Isa`] in their `*_with` forms so tests can run every variant in
//! one process and compare them bit for bit; the plain forms use [`isa()`].

use std::sync::OnceLock;

/// An instruction-set variant of the CPU kernels, worst to best within an architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Portable Rust, no SIMD beyond the baseline target.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// x86-64 with AVX-512 F/BW/VL/DQ and VNNI (and everything of `Avx2`).
    Avx512,
    /// aarch64 with Advanced SIMD.
    Neon,
    /// aarch64 with the dot-product extension.
    Dotprod,
}

impl Isa {
    /// The name `LLAMAFILE_CPU` and `--verbose` use.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
            Isa::Dotprod => "dotprod",
        }
    }

    /// True for the x86-64 variants that may use AVX2, FMA and F16C.
    pub fn has_avx2(self) -> bool {
        matches!(self, Isa::Avx2 | Isa::Avx512)
    }
}

/// Every variant this CPU can run, worst first (`Scalar` is always first).
pub fn available() -> Vec<Isa> {
    #[allow(unused_mut)]
    let mut out = vec![Isa::Scalar];
    #[cfg(target_arch = "x86_64")]
    {
        if x86_avx2() {
            out.push(Isa::Avx2);
            if x86_avx512() {
                out.push(Isa::Avx512);
            }
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") {
            out.push(Isa::Neon);
            if std::arch::is_aarch64_feature_detected!("dotprod") {
                out.push(Isa::Dotprod);
            }
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
fn x86_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

#[cfg(target_arch = "x86_64")]
fn x86_avx512() -> bool {
    x86_avx2()
        && is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512dq")
        && is_x86_feature_detected!("avx512vnni")
}

/// True where the CPU splits each 512-bit vector operation into two 256-bit halves (AMD's
/// family 19h, whose AVX-512 parts are Zen 4): there a kernel that gains from AVX-512 only by
/// the width of its registers runs better in 256-bit ones (with AVX-512's 32 of them). Same
/// bits either way: the kernels that ask keep their order of operations.
pub fn splits_512() -> bool {
    static SPLITS: OnceLock<bool> = OnceLock::new();
    *SPLITS.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::__cpuid;
            let vendor = __cpuid(0);
            let amd =
                (vendor.ebx, vendor.edx, vendor.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
            let eax = __cpuid(1).eax;
            let family = ((eax >> 8) & 0xf) + ((eax >> 20) & 0xff);
            amd && family == 0x19
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// Whether this CPU can run `isa`.
pub fn supports(isa: Isa) -> bool {
    available().contains(&isa)
}

/// The variant in use, chosen on first call (a warning on stderr when `LLAMAFILE_CPU` names
/// one this CPU cannot run).
#[inline]
pub fn isa() -> Isa {
    static CHOSEN: OnceLock<Isa> = OnceLock::new();
    *CHOSEN.get_or_init(|| {
        let forced = std::env::var("LLAMAFILE_CPU").ok();
        let (isa, warning) = choose(forced.as_deref(), &available());
        if let Some(w) = warning {
            eprintln!("warning: {w}");
        }
        isa
    })
}

/// Picks the variant named by `forced`, or the best of `available` when it is unset, empty or
/// `auto`. An unknown or unavailable name falls back to the best, with a warning to print.
pub fn choose(forced: Option<&str>, available: &[Isa]) -> (Isa, Option<String>) {
    let best = *available
        .last()
        .expect("the scalar variant is always available");
    match forced.map(str::trim) {
        None | Some("") | Some("auto") => (best, None),
        Some(want) => match available.iter().find(|i| i.name() == want) {
            Some(&i) => (i, None),
            None => {
                let names: Vec<_> = available.iter().map(|i| i.name()).collect();
                let warning = format!(
                    "LLAMAFILE_CPU={want} is not available on this CPU (have: {}); using {}",
                    names.join(", "),
                    best.name()
                );
                (best, Some(warning))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_honours_llamafile_cpu() {
        let avail = available();
        let best = *avail.last().unwrap();
        assert_eq!(avail[0], Isa::Scalar);
        assert!(avail.contains(&isa()));
        assert_eq!(choose(None, &avail).0, best);
        assert_eq!(choose(Some("auto"), &avail).0, best);
        assert_eq!(choose(Some(" scalar "), &avail), (Isa::Scalar, None));
        let (i, warn) = choose(Some("sse9"), &avail);
        assert_eq!(i, best);
        assert!(warn.unwrap().contains("sse9"));
    }
}
