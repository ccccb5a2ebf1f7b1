//! llamafile: run GGUF language models from one executable, on the CPU.
//!
//! The library holds the engine; `src/main.rs` is the command-line front door and
//! `tools/zipalign` packs models into the executable.

pub mod app;
pub mod args;
pub mod backend;
pub mod bench;
pub mod bundle;
pub mod calendar;
pub mod chat;
pub mod cli;
pub mod cores;
pub mod cpu;
pub mod embedding;
pub mod engine;
pub mod escapes;
pub mod gguf;
pub mod gpu;
pub mod model;
pub mod ops;
pub mod perplexity;
pub mod platform;
pub mod pool;
pub mod quant;
pub mod sampling;
pub mod server;
pub mod stop_text;
pub mod timings;
pub mod tokenizer;
pub mod upgrade;
pub mod vision;
