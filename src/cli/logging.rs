//! llama.cpp's logging and timing flags. This program writes a few lines to stderr (more with
//! `-v`), with no levels, colours, prefixes or timestamps to choose, so these are accepted and
//! change nothing; logging to a file is refused (redirect stderr instead).

use super::table::{switch, valued, Check, Effect, Flag, Takes};

const FEW_LINES: &str = "the log is a few plain lines on stderr (-v for more)";

/// Logging flags.
pub const FLAGS: &[Flag] = &[
    valued(
        &["log-file"],
        &[],
        "FNAME",
        Check::Text,
        Some("LLAMA_ARG_LOG_FILE"),
        Effect::Refused("logging to a file (redirect stderr instead)"),
    ),
    switch(
        &["log-jsonl"],
        &[],
        Some("LLAMA_ARG_LOG_JSONL"),
        Effect::NoOp(FEW_LINES),
    ),
    switch(&["no-log-jsonl"], &[], None, Effect::NoOp(FEW_LINES)),
    Flag {
        long: &["log-colors"],
        short: &[],
        takes: Takes::Optional("on|off|auto", Check::OneOf(&["on", "off", "auto"]), "on"),
        env: Some("LLAMA_ARG_LOG_COLORS"),
        effect: Effect::NoOp(FEW_LINES),
    },
    switch(
        &["log-prefix"],
        &[],
        Some("LLAMA_ARG_LOG_PREFIX"),
        Effect::NoOp(FEW_LINES),
    ),
    switch(&["no-log-prefix"], &[], None, Effect::NoOp(FEW_LINES)),
    switch(
        &["log-timestamps"],
        &[],
        Some("LLAMA_ARG_LOG_TIMESTAMPS"),
        Effect::NoOp(FEW_LINES),
    ),
    switch(&["no-log-timestamps"], &[], None, Effect::NoOp(FEW_LINES)),
    switch(
        &["perf"],
        &[],
        Some("LLAMA_ARG_PERF"),
        Effect::NoOp("-v prints the run's timings; responses always carry `timings`"),
    ),
    switch(
        &["no-perf"],
        &[],
        None,
        Effect::NoOp("-v prints the run's timings; responses always carry `timings`"),
    ),
    switch(
        &["warmup"],
        &[],
        None,
        Effect::NoOp("there is no warm-up run"),
    ),
];
