//! The engine: a model opened for running ([`Loaded`]), its blocks placed on backends and the
//! forward pass across them ([`PlacedModel`]), one sequence and its decode loop
//! ([`Session`]), and speculative decoding. Every front end (CLI modes, `--chat`, the bench,
//! perplexity, the server's slots) runs models through this layer; it imports nothing from them.

pub mod decode;
pub mod loaded;
pub mod media;
pub mod placed;
pub mod session;
pub mod speculative;

pub use decode::{Budget, StopReason};
pub use loaded::{load_model, load_model_from, Loaded};
pub use placed::PlacedModel;
pub use session::Session;
