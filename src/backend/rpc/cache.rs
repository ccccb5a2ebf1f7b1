//! The KV cache part of a sequence for the blocks a worker runs, kept on that worker: one buffer
//! holding, for each layer, `n_ctx` key rows then `n_ctx` value rows of f16 (the host cache's
//! layout, so saving and restoring are plain byte copies). The pass writes it on the worker;
//! the client only tracks how many positions are filled. Freed on the worker when dropped.

use super::graph::{contiguous_nb, F16};
use super::wire::WireTensor;
use super::Worker;
use crate::backend::{BackendError, KvCache, LayerCache};
use std::any::Any;
use std::ops::Range;
use std::sync::Arc;

/// Where a cache part's rows are on its worker.
#[derive(Clone, Debug)]
pub struct CacheAddr {
    pub buffer: u64,
    pub base: u64,
    pub n_ctx: usize,
    pub first_layer: usize,
    /// Bytes of one layer's keys (and of its values).
    pub layer_bytes: u64,
}

impl CacheAddr {
    /// Address of layer `il`'s key rows.
    pub fn k(&self, il: usize) -> u64 {
        self.base + 2 * (il - self.first_layer) as u64 * self.layer_bytes
    }

    /// Address of layer `il`'s value rows.
    pub fn v(&self, il: usize) -> u64 {
        self.k(il) + self.layer_bytes
    }
}

/// Keys and values of one sequence for a range of layers, on a worker.
pub struct RpcCache {
    pub(super) worker: Arc<Worker>,
    pub(super) addr: CacheAddr,
    layers: Range<usize>,
    kv_dim: usize,
    pub(super) len: usize,
}

impl RpcCache {
    /// A zeroed cache part on `worker` for `layers`, `n_ctx` positions of `kv_dim` values.
    pub fn new(
        worker: Arc<Worker>,
        layers: Range<usize>,
        n_ctx: usize,
        kv_dim: usize,
    ) -> Result<RpcCache, BackendError> {
        let align = worker.alignment;
        let layer_bytes = ((n_ctx * kv_dim * 2) as u64).div_ceil(align) * align;
        let total = layer_bytes * 2 * layers.len() as u64;
        let addr = worker.with(|c| {
            let (buffer, _) = c.alloc_buffer(worker.device, total)?;
            let base = c.buffer_base(buffer)?;
            c.buffer_clear(buffer, 0)?;
            Ok(CacheAddr {
                buffer,
                base,
                n_ctx,
                first_layer: layers.start,
                layer_bytes,
            })
        })?;
        Ok(RpcCache {
            worker,
            addr,
            layers,
            kv_dim,
            len: 0,
        })
    }

    /// Layer `il`'s keys (`values`: its values) as a tensor of the worker.
    fn rows_tensor(&self, il: usize, values: bool) -> WireTensor {
        let ne = [self.kv_dim as i64, self.addr.n_ctx as i64, 1, 1];
        WireTensor {
            id: 1,
            ty: F16,
            buffer: self.addr.buffer,
            ne: ne.map(|v| v as u32),
            nb: contiguous_nb(F16, ne).map(|v| v as u32),
            data: if values {
                self.addr.v(il)
            } else {
                self.addr.k(il)
            },
            ..WireTensor::default()
        }
    }

    /// Marks positions `..=pos` filled.
    pub(super) fn mark_filled(&mut self, pos: usize) {
        self.len = self.len.max(pos + 1);
    }
}

impl Drop for RpcCache {
    fn drop(&mut self) {
        // A worker that is gone has freed it already.
        let _ = self.worker.with(|c| c.free_buffer(self.addr.buffer));
    }
}

impl LayerCache for RpcCache {
    fn layers(&self) -> Range<usize> {
        self.layers.clone()
    }

    fn n_ctx(&self) -> usize {
        self.addr.n_ctx
    }

    fn len(&self) -> usize {
        self.len
    }

    fn truncate(&mut self, keep: usize) {
        self.len = self.len.min(keep);
    }

    fn to_host(&self) -> Result<KvCache, BackendError> {
        let mut host = KvCache::for_layers(self.layers.clone(), self.addr.n_ctx, self.kv_dim);
        let n = self.len * self.kv_dim * 2;
        if n > 0 {
            self.worker.with(|c| {
                for il in self.layers.clone() {
                    c.get_tensor(
                        &self.rows_tensor(il, false),
                        0,
                        &mut host.key_bytes_mut(il)[..n],
                    )?;
                    c.get_tensor(
                        &self.rows_tensor(il, true),
                        0,
                        &mut host.value_bytes_mut(il)[..n],
                    )?;
                }
                Ok(())
            })?;
            host.mark_filled(self.len - 1);
        }
        Ok(host)
    }

    fn load_host(&mut self, host: &KvCache) -> Result<(), BackendError> {
        if host.layers() != self.layers
            || host.kv_dim() != self.kv_dim
            || host.len() > self.addr.n_ctx
        {
            return Err(BackendError::LayerMismatch {
                want: self.layers.clone(),
                got: host.layers(),
            });
        }
        if !host.types().is_default() {
            return Err(BackendError::CacheTypes {
                want: crate::backend::KvTypes::default().to_string(),
                got: host.types().to_string(),
            });
        }
        let n = host.len() * self.kv_dim * 2;
        if n > 0 {
            self.worker.with(|c| {
                for il in self.layers.clone() {
                    let k = &host.key_rows(il).bytes[..n];
                    c.set_tensor(&self.rows_tensor(il, false), 0, k, false)?;
                    let v = &host.value_rows(il).bytes[..n];
                    c.set_tensor(&self.rows_tensor(il, true), 0, v, false)?;
                }
                Ok(())
            })?;
        }
        self.len = host.len();
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
