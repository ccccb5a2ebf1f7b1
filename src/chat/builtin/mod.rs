//! Chat formats selectable by name with `--chat-template NAME`: every name llama.cpp's
//! `llm_chat_template` knows, each written as Jinja for the same renderer the models' own
//! templates use, and each writing what llama.cpp's hand-written C++ for it writes (see
//! `formats`). The one liberty: where llama.cpp upper-cases a role byte by byte in ASCII
//! (`bailing`, `openchat`), Jinja's `upper` also upper-cases letters beyond ASCII.

mod formats;

use formats::FORMATS;

/// The Jinja source of the built-in format `name`.
pub fn builtin(name: &str) -> Option<&'static str> {
    FORMATS.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// The built-in names, comma-separated, in llama.cpp's (sorted) order, for error messages and
/// `--help`.
pub fn names() -> String {
    FORMATS
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
