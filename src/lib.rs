//! llamafile: run GGUF language models from one executable, on the CPU.
//!
//! The library holds the engine; `src/main.rs` is the command-line front door and
//! `tools/zipalign` packs models into the executable.

pub mod gguf;
pub mod quant;
pub mod tokenizer;
