//! Which blocks go to which worker device, as llama.cpp splits layers across devices: the last
//! `-ngl` blocks are offloaded (the first ones stay on the CPU, next to the embedding lookup),
//! and the offloaded blocks are shared out in proportion to each device's weight, its free
//! memory unless `--tensor-split` gives proportions. Blocks a worker cannot run stay on the CPU
//! between the runs that do go.

use super::{RpcBackend, RpcError, Worker};
use crate::backend::{Backend, CpuBackend, GpuLayers, LayerPlan, Placement};
use crate::model::Model;
use std::ops::Range;
use std::sync::Arc;

/// The device index of each block of `device_range`, shared out by `weights` (one per device,
/// not all zero) as llama.cpp does: block `i` of `n` goes to the first device whose cumulative
/// share exceeds `i / n`.
pub fn split_layers(
    n_layer: usize,
    device_range: Range<usize>,
    weights: &[f64],
) -> Vec<Option<usize>> {
    let total: f64 = weights.iter().sum();
    let mut cum = Vec::with_capacity(weights.len());
    let mut acc = 0.0;
    for w in weights {
        acc += w / total;
        cum.push(acc);
    }
    let n = device_range.len();
    (0..n_layer)
        .map(|il| {
            if !device_range.contains(&il) {
                return None;
            }
            let frac = (il - device_range.start) as f64 / n as f64;
            Some(
                cum.iter()
                    .position(|&c| c > frac)
                    .unwrap_or(weights.len() - 1),
            )
        })
        .collect()
}

/// The placement of a model across the CPU and workers, and what to say about it.
pub struct RpcPlan {
    pub placement: Placement,
    /// Lines for the start of the run: what runs where, and which blocks stay on the CPU.
    pub notes: Vec<String>,
}

/// Places `model`'s blocks: `ngl` of them offloaded to `workers`, shared by `split` (or by
/// free memory), each run of blocks a worker supports uploaded to it.
pub fn place(
    model: &Model,
    workers: &[Arc<Worker>],
    ngl: GpuLayers,
    split: Option<&[f64]>,
) -> Result<RpcPlan, RpcError> {
    let n_layer = model.config.n_layer;
    let plan = LayerPlan::new(ngl, n_layer, !workers.is_empty());
    let weights: Vec<f64> = match split {
        Some(s) if s.iter().any(|&v| v > 0.0) => {
            let mut s = s.to_vec();
            s.resize(workers.len(), 0.0);
            s
        }
        _ => {
            let mut w = Vec::with_capacity(workers.len());
            for d in workers {
                w.push(d.memory()?.0 as f64);
            }
            if w.iter().all(|&v| v <= 0.0) {
                w.iter_mut().for_each(|v| *v = 1.0);
            }
            w
        }
    };
    let mut notes = Vec::new();
    let mut assign = split_layers(n_layer, plan.device.clone(), &weights);
    for (il, a) in assign.iter_mut().enumerate() {
        if a.is_some() {
            if let Err(why) = RpcBackend::supports(model, il) {
                notes.push(format!("llamafile: layer {il} stays on the CPU: {why}"));
                *a = None;
            }
        }
    }
    // Maximal runs of blocks with the same place.
    let mut runs: Vec<(Range<usize>, Option<usize>)> = Vec::new();
    for (il, &a) in assign.iter().enumerate() {
        match runs.last_mut() {
            Some((r, last)) if *last == a => r.end = il + 1,
            _ => runs.push((il..il + 1, a)),
        }
    }
    let mut stages: Vec<Arc<dyn Backend>> = Vec::new();
    for (r, a) in runs {
        match a {
            None => stages.push(Arc::new(CpuBackend::new(r))),
            Some(d) => {
                let b = RpcBackend::new(model, workers[d].clone(), r.clone())?;
                let (bytes, sent) = b.weight_bytes();
                notes.push(format!(
                    "llamafile: {} ({}): layers {r:?}, {} MiB of weights ({} MiB sent)",
                    workers[d].name,
                    workers[d].endpoint,
                    bytes >> 20,
                    sent >> 20
                ));
                stages.push(Arc::new(b));
            }
        }
    }
    let placement = Placement::new(stages, None, n_layer).expect("runs cover the model in order");
    notes.insert(0, format!("llamafile: {}", placement.describe()));
    Ok(RpcPlan { placement, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_are_shared_out_as_llama_cpp_shares_them() {
        // Two equal devices, all 30 blocks: 15 each.
        let a = split_layers(30, 0..30, &[1.0, 1.0]);
        assert_eq!(a.iter().filter(|d| **d == Some(0)).count(), 15);
        assert_eq!(a[14], Some(0));
        assert_eq!(a[15], Some(1));
        // The first 10 on the CPU, then 3:1.
        let a = split_layers(30, 10..30, &[3.0, 1.0]);
        assert!(a[..10].iter().all(|d| d.is_none()));
        assert_eq!(a[10..].iter().filter(|d| **d == Some(0)).count(), 15);
        assert_eq!(a[29], Some(1));
        // A device of weight 0 gets nothing.
        let a = split_layers(8, 0..8, &[0.0, 1.0]);
        assert!(a.iter().all(|d| *d == Some(1)));
    }
}
