//! The engine: a model opened for running ([`Loaded`]), one sequence and its decode loop
//! ([`Session`]), and speculative decoding. Every front end (CLI modes, `--chat`, the bench,
//! perplexity, the server's slots) runs models through this layer; it imports nothing from them.

pub mod loaded;
pub mod session;
pub mod speculative;

pub use loaded::{load_model, Loaded};
pub use session::Session;
