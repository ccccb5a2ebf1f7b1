//! The backend seam: where the forward pass hands ranges of a model's blocks to whatever runs
//! them. A forward pass is
//!
//! ```text
//! embed (host) -> blocks a..b on backend A -> blocks b..c on backend B -> ... -> output norm + head
//! ```
//!
//! This module owns the contract ([`Backend`], [`LayerCache`]), the per-sequence cache split by
//! layer range ([`SeqCache`]), the order of backends a model runs ([`Placement`]) and the
//! `-ngl` plan of which layers go where ([`LayerPlan`]). The CPU backend ([`CpuBackend`], today's
//! engine) lives in `cpu/`; a device backend lives in its own module and implements the same two
//! traits. It does not own the embedding lookup, the output norm or sampling, which stay on the
//! host (a backend may offer the output head, see [`Backend::output_head`]).
//!
//! # The contract
//!
//! * **Layers.** A backend is built for one contiguous range of block indices
//!   ([`Backend::layers`]), model-global (block 0 is the first block of the model). It places
//!   those blocks' weights wherever it computes (the CPU backend reads them in place from the
//!   mapped file; a device backend uploads them when it is built). A [`Placement`] lists
//!   backends whose ranges follow each other and cover every block.
//! * **Hidden state.** Between backends the hidden state crosses as host `f32` rows:
//!   `batch.len()` rows of `n_embd` floats, row `i` for batch entry `i`, every entry (not only
//!   those asking for logits). [`Backend::run`] reads them, runs its blocks and writes the
//!   result back into the same rows. A backend keeps its activation scratch to itself.
//! * **KV cache.** Each sequence has one [`SeqCache`]: one [`LayerCache`] part per backend, made
//!   by that backend's [`Backend::new_cache`] for the layers it runs (a draft that exits early
//!   has parts for its first blocks only). A backend is handed only the parts it made, one per
//!   sequence in the order of `batch.seq` indices, and downcasts them to its own type
//!   ([`LayerCache::as_any_mut`]); the CPU backend's part is [`KvCache`]. A part tracks how many
//!   positions it holds; truncation ([`LayerCache::truncate`]) forgets positions, a context shift
//!   ([`Backend::shift`]) drops a range and re-rotates the moved keys, and any part can be copied
//!   to and from a host [`KvCache`] of the same layers ([`LayerCache::to_host`],
//!   [`LayerCache::load_host`]) for saving and restoring a sequence.
//! * **Numerics.** Positions, RoPE, sliding windows and the attention path follow the model's
//!   [`Config`](crate::model::Config) exactly as the CPU backend does; the CPU backend split at
//!   any layer gives logits bit-identical to the unsplit pass (`tests/backend_split.rs`).
//! * **Errors.** Every method that touches a device returns [`BackendError`]; nothing panics on a
//!   device failure. `engine::PlacedModel`'s `try_*` methods pass the error on; the plain ones panic with it.
//! * **Threads.** Backends are `Send + Sync` and shared by reference; the engine runs one
//!   forward pass per model at a time, but a backend must not rely on that for memory safety.
//!
//! # The debug split
//!
//! `LLAMAFILE_SPLIT_LAYERS=K` (or `K1,K2,...`) runs blocks `0..K` on one CPU backend and `K..n` on
//! a second one, each with its own cache parts: the same numbers through the seam, which is what
//! the tests use to prove it (see [`Placement::from_env`]).

mod cpu;
pub mod encoder;
mod kv_cache;
mod placement;
mod plan;
pub mod rpc;
mod seq_cache;

pub use crate::ops::attention::KvType;
pub use cpu::lora::Adapters as LoraAdapters;
pub use cpu::CpuBackend;
pub use kv_cache::{KvCache, KvStateError, KvTypeError, KvTypes};
pub use placement::{Placement, PlacementError, SPLIT_ENV};
pub use plan::{GpuLayers, LayerPlan};
pub use seq_cache::SeqCache;

use crate::model::{Batch, ForwardPlan, LoraMix, Model};
use std::any::Any;
use std::ops::Range;

/// Why a backend could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The device (driver, kernel launch, memory) failed; `message` says how.
    #[error("{backend}: {message}")]
    Device { backend: String, message: String },
    /// A cache part made by another backend, or for other layers, was handed to this one.
    #[error("{backend}: the cache given for layers {layers:?} was not made by this backend")]
    ForeignCache {
        backend: String,
        layers: Range<usize>,
    },
    /// A sequence's cache has no part for layers the pass runs (a draft's cache, shorter than
    /// the pass).
    #[error("the sequence's cache holds no part for layers {0:?}")]
    MissingLayers(Range<usize>),
    /// A cache of one layer range was loaded from a host cache of another.
    #[error("cache layers {want:?} cannot be loaded from a host cache of layers {got:?}")]
    LayerMismatch {
        want: Range<usize>,
        got: Range<usize>,
    },
    /// A cache was loaded from a host cache of other storage types.
    #[error("a cache of types {want} cannot be loaded from a host cache of types {got}")]
    CacheTypes { want: String, got: String },
    /// The backend cannot store keys and values in the types asked for.
    #[error("{backend}: the KV cache can only be f16 here, not {types} (-ctk/-ctv)")]
    Unsupported { backend: String, types: String },
    /// An RPC worker failed: gone, silent past the timeout, out of memory (the message names
    /// it: `RPC worker HOST:PORT: ...`).
    #[error(transparent)]
    Rpc(#[from] rpc::RpcError),
}

/// One forward pass's work for one backend.
#[derive(Clone, Debug)]
pub struct Pass<'a> {
    /// The tokens (their positions and sequences index the caches handed over).
    pub batch: &'a Batch,
    /// The blocks to run: the backend's range, cut short by `plan.n_layers` for an early-exit
    /// draft. Never empty.
    pub layers: Range<usize>,
    /// What else the pass changes (routed experts of a MoE draft).
    pub plan: ForwardPlan,
    /// The scale of each of the model's LoRA adapters (`Model::lora`); only the CPU backend
    /// applies them, and a placement with other backends is refused adapters
    /// (`PlacedModel::add_lora`).
    pub lora: &'a LoraMix,
}

/// The keys and values one sequence has for the layers one backend runs.
pub trait LayerCache: Any + Send + Sync {
    /// The blocks whose keys and values this part holds (model-global indices).
    fn layers(&self) -> Range<usize>;

    /// Capacity in positions.
    fn n_ctx(&self) -> usize;

    /// Positions `0..len` hold valid entries.
    fn len(&self) -> usize;

    /// True when no position is filled.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets positions `keep..`, so they can be written again.
    fn truncate(&mut self, keep: usize);

    /// The part as a host cache, when it is one (the CPU backend's): direct access to its rows.
    fn host(&self) -> Option<&KvCache> {
        None
    }

    /// A host copy of the part, with the same layers, capacity and length (saving a sequence).
    fn to_host(&self) -> Result<KvCache, BackendError>;

    /// Replaces the part's contents with `host`'s (restoring a sequence); the layers must match
    /// and `host` must fit the capacity.
    fn load_host(&mut self, host: &KvCache) -> Result<(), BackendError>;

    /// For the backend that made the part, to get its own type back.
    fn as_any(&self) -> &dyn Any;

    /// For the backend that made the part, to get its own type back.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// Something that runs a range of a model's blocks: the CPU, or a device.
pub trait Backend: Send + Sync {
    /// A short name for messages: `cpu`, `cuda0`.
    fn name(&self) -> &str;

    /// The blocks this backend was built for (model-global indices); its weights are placed
    /// for them.
    fn layers(&self) -> Range<usize>;

    /// Whether [`Backend::run`] honours [`crate::model::Batch::bidirectional`] (an image's rows
    /// reading each other both ways, Gemma 3); a backend that does not is kept from such models'
    /// images.
    fn reads_bidirectional(&self) -> bool {
        false
    }

    /// Whether [`Backend::run`] rotates by [`crate::model::Batch::rope_pos`] (M-RoPE, an
    /// image's rows at 2-D positions, Qwen2-VL); a backend that does not is kept from such
    /// models' images.
    fn reads_mrope(&self) -> bool {
        false
    }

    /// A fresh cache part of one sequence for `layers` (a prefix of [`Backend::layers`]: all
    /// of them, or fewer for an early-exit draft), with room for `n_ctx` positions, keys and
    /// values stored as `types` says.
    fn new_cache(
        &self,
        model: &Model,
        layers: Range<usize>,
        n_ctx: usize,
        types: KvTypes,
    ) -> Result<Box<dyn LayerCache>, BackendError>;

    /// Runs blocks `pass.layers` over the hidden rows `x` (`pass.batch.len()` rows of `n_embd`
    /// host floats, updated in place), storing each entry's keys and values in
    /// `caches[pass.batch.seq[i]]`, a part this backend made.
    fn run(
        &self,
        model: &Model,
        pass: &Pass,
        caches: &mut [&mut dyn LayerCache],
        x: &mut [f32],
    ) -> Result<(), BackendError>;

    /// Context shift of one sequence's part: forgets positions `keep..keep + discard`, moves the
    /// later ones down and re-rotates their keys for their new positions.
    fn shift(
        &self,
        model: &Model,
        cache: &mut dyn LayerCache,
        keep: usize,
        discard: usize,
    ) -> Result<(), BackendError>;

    /// The logits of output-normed host rows `h` (`n_embd` floats each) into `logits`
    /// (`n_vocab` floats each, before the final soft-cap, which the host applies), when this
    /// backend holds the output matrix; `None` (the default): the host computes them. Asked
    /// only of the backend the [`Placement`] names for the head.
    fn output_head(
        &self,
        _model: &Model,
        _h: &[f32],
        _logits: &mut [f32],
    ) -> Option<Result<(), BackendError>> {
        None
    }
}
