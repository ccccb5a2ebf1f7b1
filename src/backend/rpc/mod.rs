//! The RPC backend: blocks run on llama.cpp's RPC workers (`ggml-rpc-server`, the
//! `rpc-server` of llama.cpp's docs) over TCP, speaking ggml's RPC protocol 7.0 as a client.
//! Each worker device is a [`Worker`]; a [`RpcBackend`] is built for one contiguous range of
//! blocks on one worker: it uploads their weights to a buffer there (`weights.rs`), builds the
//! ggml graph of a pass through them (`block.rs`, `graph.rs`, with the op numbers of `ops.rs`),
//! and keeps each sequence's keys and values in a buffer on the worker (`cache.rs`). The hidden
//! rows go over with `SET_TENSOR` and come back with `GET_TENSOR`: one round trip per pass and
//! worker. Blocks the graph cannot express ([`RpcBackend::supports`]) stay on the CPU.
//!
//! The protocol has no authentication and the client never listens: use workers only on a
//! trusted network or through a tunnel. Every socket operation has the `-to` timeout, and a
//! worker that fails is named in the error ([`RpcError`]).

mod block;
mod cache;
mod conn;
mod graph;
mod ops;
mod placement;
mod weights;
mod wire;

pub use cache::RpcCache;
pub use conn::{parse_endpoint, total_traffic, Conn};
pub use placement::{place, split_layers, RpcPlan};
pub use wire::{WireTensor, PROTO_VERSION};

/// A contiguous f32 vector of `n` values at address `addr` of buffer `buffer` (for tests and
/// tools that talk to a worker directly).
pub fn wire_tensor_f32(buffer: u64, addr: u64, n: usize) -> WireTensor {
    let ne = [n as i64, 1, 1, 1];
    WireTensor {
        id: 1,
        ty: graph::F32,
        buffer,
        ne: ne.map(|v| v as u32),
        nb: graph::contiguous_nb(graph::F32, ne).map(|v| v as u32),
        data: addr,
        ..WireTensor::default()
    }
}

/// Connects to the workers of `endpoints` and places `model`'s blocks on them and the CPU (see
/// `placement.rs`): what `--rpc` does at start. `devices` (`--device`), when given, names the
/// worker devices that take blocks (`RPC0`, `RPC1`, ...); the others are let go.
pub fn start(
    model: &Model,
    endpoints: &[String],
    devices: Option<&[String]>,
    ngl: super::GpuLayers,
    split: Option<&[f64]>,
    timeout: Duration,
) -> Result<RpcPlan, RpcError> {
    let mut workers = Worker::connect_all(endpoints, timeout)?;
    if let Some(names) = devices {
        workers = select(workers, names)?;
    }
    placement::place(model, &workers, ngl, split)
}

/// The workers `names` names, in the order named; a name no worker has is refused, as
/// llama.cpp refuses it (`invalid device`).
pub fn select(workers: Vec<Arc<Worker>>, names: &[String]) -> Result<Vec<Arc<Worker>>, RpcError> {
    names
        .iter()
        .map(|n| {
            workers
                .iter()
                .find(|w| w.name == *n)
                .cloned()
                .ok_or_else(|| RpcError::NoDevice(n.clone()))
        })
        .collect()
}

/// `--list-devices` lines for the workers of `endpoints`, as llama.cpp prints them:
/// `  RPC0: HOST:PORT (TOTAL MiB, FREE MiB free)`.
pub fn device_lines(endpoints: &[String], timeout: Duration) -> Result<Vec<String>, RpcError> {
    let mut lines = Vec::new();
    for w in Worker::connect_all(endpoints, timeout)? {
        let (free, total) = w.memory()?;
        lines.push(format!(
            "  {}: {} ({} MiB, {} MiB free)",
            w.name,
            w.endpoint,
            total >> 20,
            free >> 20
        ));
    }
    Ok(lines)
}

use super::{Backend, BackendError, CpuBackend, KvTypes, LayerCache, Pass};
use crate::model::{Attention, Config, Ffn, Model, NormPlacement, RopeFactors};
use block::SeqRows;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Why a worker could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("--rpc {0:?}: expected HOST:PORT")]
    BadEndpoint(String),
    #[error("RPC worker {endpoint}: cannot connect: {message}")]
    Connect { endpoint: String, message: String },
    #[error(
        "RPC worker {endpoint} speaks RPC protocol {got}, this llamafile speaks {want}: \
         run a ggml-rpc-server of the same protocol version"
    )]
    Version {
        endpoint: String,
        got: String,
        want: String,
    },
    #[error("RPC worker {endpoint}: {message}")]
    Lost { endpoint: String, message: String },
    #[error("RPC worker {endpoint}: out of memory: cannot allocate {} MiB", bytes.div_ceil(1 << 20))]
    OutOfMemory { endpoint: String, bytes: u64 },
    #[error("--device: invalid device: {0} (see --list-devices)")]
    NoDevice(String),
}

/// One device of a worker, over a connection shared with the worker's other devices.
pub struct Worker {
    /// `RPC0`, `RPC1`, ...: numbered across every worker's devices in `--rpc` order, as
    /// llama.cpp names RPC devices (for `--device` and `--list-devices`).
    pub name: String,
    pub endpoint: String,
    pub device: u32,
    /// Alignment of the device's buffers.
    pub alignment: u64,
    conn: Arc<Mutex<Conn>>,
}

impl Worker {
    /// Connects to every endpoint of `endpoints` (`HOST:PORT` each) and returns one worker per
    /// device they serve, in order. `timeout` bounds every socket operation.
    pub fn connect_all(
        endpoints: &[String],
        timeout: Duration,
    ) -> Result<Vec<Arc<Worker>>, RpcError> {
        let mut out = Vec::new();
        for ep in endpoints {
            let mut conn = Conn::connect(ep, timeout)?;
            let n = conn.device_count()?;
            let mut aligns = Vec::new();
            for d in 0..n {
                aligns.push(conn.alignment(d)?);
            }
            let conn = Arc::new(Mutex::new(conn));
            for (d, alignment) in aligns.into_iter().enumerate() {
                out.push(Arc::new(Worker {
                    name: format!("RPC{}", out.len()),
                    endpoint: ep.clone(),
                    device: d as u32,
                    alignment,
                    conn: conn.clone(),
                }));
            }
        }
        Ok(out)
    }

    /// Runs `f` on the connection, the error as the seam's (naming the worker).
    pub fn with<R>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<R, RpcError>,
    ) -> Result<R, BackendError> {
        Ok(self.with_rpc(f)?)
    }

    /// Runs `f` on the connection.
    pub fn with_rpc<R>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<R, RpcError>,
    ) -> Result<R, RpcError> {
        let mut c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut c)
    }

    /// Free and total memory of the device, in bytes.
    pub fn memory(&self) -> Result<(u64, u64), RpcError> {
        self.with_rpc(|c| c.device_memory(self.device))
    }

    /// Bytes sent to and received from the worker so far (all its devices).
    pub fn traffic(&self) -> (u64, u64) {
        let c = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        (c.sent, c.received)
    }
}

/// The compute buffer of a backend: handle, address, size.
struct Compute {
    buffer: u64,
    base: u64,
    size: u64,
}

/// A range of blocks on one worker device.
pub struct RpcBackend {
    worker: Arc<Worker>,
    layers: Range<usize>,
    weights: weights::Uploaded,
    compute: Mutex<Option<Compute>>,
}

impl RpcBackend {
    /// Whether the worker can run the whole model's shape (what every block shares), or why not.
    pub fn supports_model(cfg: &Config) -> Result<(), String> {
        if cfg.mla.is_some() {
            return Err("latent attention is not built for RPC workers".into());
        }
        if cfg.fused.qkv || cfg.fused.gate_up {
            return Err("fused tensors are not built for RPC workers".into());
        }
        if cfg.norms == NormPlacement::PreAndPost {
            return Err("post-norms are not built for RPC workers".into());
        }
        if cfg.scale_query || cfg.attn_softcap.is_some() {
            return Err("query scaling and soft-capping are not built for RPC workers".into());
        }
        if cfg.rope.yarn.is_some() || cfg.rope.factors == RopeFactors::LongShort {
            return Err("YaRN and LongRoPE are not built for RPC workers".into());
        }
        if cfg.ffn_act != crate::model::FfnActivation::Silu {
            return Err("only SiLU-gated feed-forward blocks are built for RPC workers".into());
        }
        Ok(())
    }

    /// Whether block `il` of `model` can run on a worker, or why not.
    pub fn supports(model: &Model, il: usize) -> Result<(), String> {
        RpcBackend::supports_model(&model.config)?;
        let l = &model.weights.layers[il];
        if !matches!(l.attn, Attention::Mha(_)) {
            return Err(format!("layer {il}: latent attention"));
        }
        if !matches!(l.ffn, Ffn::Dense(_)) {
            return Err(format!("layer {il}: experts are not built for RPC workers"));
        }
        if model.config.layer_window(il).is_some() {
            return Err(format!(
                "layer {il}: sliding-window attention is not built for RPC workers"
            ));
        }
        Ok(())
    }

    /// Uploads the weights of blocks `layers` of `model` to `worker`.
    pub fn new(
        model: &Model,
        worker: Arc<Worker>,
        layers: Range<usize>,
    ) -> Result<RpcBackend, RpcError> {
        let weights = worker.with_rpc(|c| {
            weights::upload(c, worker.device, worker.alignment, model, layers.clone())
        })?;
        Ok(RpcBackend {
            worker,
            layers,
            weights,
            compute: Mutex::new(None),
        })
    }

    /// The worker device this runs on.
    pub fn worker(&self) -> &Arc<Worker> {
        &self.worker
    }

    /// Bytes of weights on the worker, and how many of them went over the wire (fewer when
    /// the worker's file cache, `ggml-rpc-server -c`, had them).
    pub fn weight_bytes(&self) -> (u64, u64) {
        (self.weights.bytes, self.weights.sent)
    }

    fn own<'c>(&self, cache: &'c mut dyn LayerCache) -> Result<&'c mut RpcCache, BackendError> {
        let layers = cache.layers();
        match cache.as_any_mut().downcast_mut::<RpcCache>() {
            Some(c) if Arc::ptr_eq(&c.worker, &self.worker) => Ok(c),
            _ => Err(BackendError::ForeignCache {
                backend: self.worker.name.clone(),
                layers,
            }),
        }
    }
}

impl Drop for RpcBackend {
    fn drop(&mut self) {
        let compute = self
            .compute
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let _ = self.worker.with_rpc(|c| {
            if let Some(b) = compute {
                c.free_buffer(b.buffer)?;
            }
            c.free_buffer(self.weights.buffer)
        });
    }
}

impl Backend for RpcBackend {
    fn name(&self) -> &str {
        &self.worker.name
    }

    fn layers(&self) -> Range<usize> {
        self.layers.clone()
    }

    fn new_cache(
        &self,
        model: &Model,
        layers: Range<usize>,
        n_ctx: usize,
        types: KvTypes,
    ) -> Result<Box<dyn LayerCache>, BackendError> {
        if !types.is_default() {
            return Err(BackendError::Unsupported {
                backend: self.worker.name.clone(),
                types: types.to_string(),
            });
        }
        let c = RpcCache::new(self.worker.clone(), layers, n_ctx, model.config.kv_dim())?;
        Ok(Box::new(c))
    }

    fn run(
        &self,
        model: &Model,
        pass: &Pass,
        caches: &mut [&mut dyn LayerCache],
        x: &mut [f32],
    ) -> Result<(), BackendError> {
        let batch = pass.batch;
        let mut own = Vec::with_capacity(caches.len());
        for c in caches.iter_mut() {
            own.push(self.own(&mut **c)?);
        }
        // The sequences in the order they first appear, each with its rows.
        let mut order: Vec<usize> = Vec::new();
        let mut rows: Vec<Vec<usize>> = vec![Vec::new(); own.len()];
        for (i, &s) in batch.seq.iter().enumerate() {
            if rows[s].is_empty() {
                order.push(s);
            }
            rows[s].push(i);
        }
        let seqs: Vec<SeqRows> = order
            .iter()
            .map(|&s| {
                let c = &own[s];
                let n_kv = rows[s].iter().map(|&r| batch.pos[r] + 1).max().unwrap_or(0);
                assert!(n_kv <= c.addr.n_ctx, "position beyond the cache");
                SeqRows {
                    rows: std::mem::take(&mut rows[s]),
                    n_kv: n_kv.max(c.len.min(n_kv)),
                    cache: c.addr.clone(),
                }
            })
            .collect();
        let cfg = &model.config;
        let built = block::build(
            cfg,
            &self.weights,
            pass.layers.clone(),
            batch,
            &seqs,
            x,
            self.worker.alignment,
        );
        let mut compute = self.compute.lock().unwrap_or_else(|p| p.into_inner());
        let dev = self.worker.device;
        let mut out = vec![0u8; x.len() * 4];
        self.worker.with_rpc(|c| {
            let need = built.graph.size;
            if compute.as_ref().is_none_or(|b| b.size < need) {
                if let Some(old) = compute.take() {
                    c.free_buffer(old.buffer)?;
                }
                // Room to grow, so that a slowly growing context does not reallocate often.
                let want = need + need / 4;
                let (buffer, size) = c.alloc_buffer(dev, want)?;
                let base = c.buffer_base(buffer)?;
                *compute = Some(Compute { buffer, base, size });
            }
            let b = compute.as_ref().expect("allocated above");
            for (t, data) in &built.inputs {
                c.set_tensor(&built.graph.wire(*t, b.buffer, b.base), 0, data, false)?;
            }
            c.graph_compute(dev, built.graph.serialize(dev, b.buffer, b.base))?;
            c.get_tensor(
                &built.graph.wire(built.output, b.buffer, b.base),
                0,
                &mut out,
            )
        })?;
        for (v, b) in x.iter_mut().zip(out.chunks_exact(4)) {
            *v = f32::from_le_bytes(b.try_into().expect("4 bytes"));
        }
        for (&s, &p) in batch.seq.iter().zip(&batch.pos) {
            own[s].mark_filled(p);
        }
        Ok(())
    }

    fn shift(
        &self,
        model: &Model,
        cache: &mut dyn LayerCache,
        keep: usize,
        discard: usize,
    ) -> Result<(), BackendError> {
        // Through the host: the part comes over, is shifted and re-rotated there as the CPU
        // backend does it, and goes back.
        let cache = self.own(cache)?;
        let mut host = cache.to_host()?;
        CpuBackend::new(cache.layers()).shift(model, &mut host, keep, discard)?;
        cache.load_host(&host)
    }
}
