//! llama.cpp sampling flags that the sampler chain here does not act on: the adaptive-p
//! sampler is not built, so a target is refused and its decay accepted without effect.

use super::table::{valued, Check, Effect, Flag};

fn disabled(v: &str) -> bool {
    v.trim().parse::<f64>().is_ok_and(|x| x < 0.0)
}

/// Sampling flags accepted without effect, or refused.
pub const FLAGS: &[Flag] = &[
    valued(
        &["adaptive-target"],
        &[],
        "N",
        Check::Float,
        None,
        Effect::NoOpIf(
            disabled,
            "a negative target (off)",
            "the adaptive-p sampler",
        ),
    ),
    valued(
        &["adaptive-decay"],
        &[],
        "N",
        Check::Float,
        None,
        Effect::NoOp("only the adaptive-p sampler reads it, and it is not built"),
    ),
];
