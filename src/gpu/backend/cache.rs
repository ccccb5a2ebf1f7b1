//! The device backend's KV cache part: for each of its layers, keys and values of up to
//! `n_ctx` positions as f16 rows in device memory (the host cache's layout, so copies either way
//! are plain byte copies), and how many positions are filled. Saving, restoring and context
//! shifts go through a host [`KvCache`] of f16 rows: the device kernels read f16 only, so a
//! device part is never made of other types (`-ctk`/`-ctv` with `-ngl` is refused).

use crate::backend::{BackendError, LayerCache};
use crate::backend::{KvCache, KvTypes};
use crate::gpu::{Device, DeviceBuffer, GpuError};
use std::any::Any;
use std::ops::Range;

/// Keys and values of one sequence for a range of layers, on the device.
pub struct CudaCache {
    device: Device,
    layers: Range<usize>,
    n_ctx: usize,
    kv_dim: usize,
    /// Per layer: (keys, values), `n_ctx * kv_dim` halves each.
    pub(super) rows: Vec<(DeviceBuffer, DeviceBuffer)>,
    pub(super) len: usize,
}

/// A device failure as the seam's error.
pub(super) fn device_error(e: GpuError) -> BackendError {
    BackendError::Device {
        backend: "cuda".to_string(),
        message: e.to_string(),
    }
}

impl CudaCache {
    /// An empty cache (device memory allocated, contents undefined until written).
    pub fn new(
        device: &Device,
        layers: Range<usize>,
        n_ctx: usize,
        kv_dim: usize,
    ) -> Result<CudaCache, GpuError> {
        let bytes = n_ctx * kv_dim * 2;
        let rows = layers
            .clone()
            .map(|_| Ok((device.alloc(bytes)?, device.alloc(bytes)?)))
            .collect::<Result<Vec<_>, GpuError>>()?;
        Ok(CudaCache {
            device: device.clone(),
            layers,
            n_ctx,
            kv_dim,
            rows,
            len: 0,
        })
    }

    /// Capacity in positions.
    pub(super) fn n_ctx_of(&self) -> usize {
        self.n_ctx
    }

    /// The first layer held (model-global).
    pub(super) fn first_layer(&self) -> usize {
        self.layers.start
    }

    /// Marks positions `..=pos` filled.
    pub(super) fn mark_filled(&mut self, pos: usize) {
        self.len = self.len.max(pos + 1);
    }
}

impl LayerCache for CudaCache {
    fn layers(&self) -> Range<usize> {
        self.layers.clone()
    }

    fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    fn len(&self) -> usize {
        self.len
    }

    fn truncate(&mut self, keep: usize) {
        self.len = self.len.min(keep);
    }

    fn to_host(&self) -> Result<KvCache, BackendError> {
        let mut host = KvCache::for_layers(self.layers.clone(), self.n_ctx, self.kv_dim);
        let n = self.len * self.kv_dim * 2;
        for (il, (k, v)) in self.layers.clone().zip(&self.rows) {
            self.device
                .read(k, 0, &mut host.key_bytes_mut(il)[..n])
                .map_err(device_error)?;
            self.device
                .read(v, 0, &mut host.value_bytes_mut(il)[..n])
                .map_err(device_error)?;
        }
        if self.len > 0 {
            host.mark_filled(self.len - 1);
        }
        Ok(host)
    }

    fn load_host(&mut self, host: &KvCache) -> Result<(), BackendError> {
        if host.layers() != self.layers || host.kv_dim() != self.kv_dim || host.len() > self.n_ctx {
            return Err(BackendError::LayerMismatch {
                want: self.layers.clone(),
                got: host.layers(),
            });
        }
        if !host.types().is_default() {
            return Err(BackendError::CacheTypes {
                want: KvTypes::default().to_string(),
                got: host.types().to_string(),
            });
        }
        let n = host.len() * self.kv_dim * 2;
        for (il, (k, v)) in self.layers.clone().zip(&self.rows) {
            for (buf, rows) in [(k, host.key_rows(il)), (v, host.value_rows(il))] {
                self.device
                    .write(buf, 0, &rows.bytes[..n])
                    .map_err(device_error)?;
            }
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
