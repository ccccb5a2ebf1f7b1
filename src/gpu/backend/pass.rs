//! One forward pass of the device backend's blocks as kernel launches, in the order of the CPU
//! backend's `layer.rs`: attention norm, Q/K/V projections (+ biases, QK-norm), RoPE per
//! sequence run, the query scale, keys and values into each sequence's cache, attention per
//! run, output projection, post-norm and residual; then the feed-forward block likewise. Every
//! run's keys are stored before any run attends, as on the CPU. Launch shapes follow each
//! kernel's header comment in `gpu-src/`.

use super::cache::CudaCache;
use super::weights::{f32_bytes, f32_from_bytes, DeviceMatrix};
use super::CudaBackend;
use crate::backend::Pass;
use crate::gpu::{Arg, DeviceBuffer, GpuError, LaunchShape};
use crate::model::{FfnActivation, Model};

/// Largest token count the matrix-vector kernels take (MATVEC_MAX_TOKENS in matvec.cu).
pub const MATVEC_MAX_TOKENS: usize = 8;
/// Threads per block of the element-wise kernels.
const ELEMENTWISE: u32 = 256;

/// A one-dimensional launch of `blocks` blocks of `threads`.
pub fn shape(blocks: usize, threads: u32) -> LaunchShape {
    LaunchShape {
        grid: (blocks as u32, 1, 1),
        block: (threads, 1, 1),
        shared_bytes: 0,
    }
}

/// The launch of the matrix kernel for `rows` output rows and `n_tok` tokens: the
/// matrix-vector kernel (one warp a row) up to [`MATVEC_MAX_TOKENS`] tokens, else the 64 x 64
/// tiled one.
pub fn matrix_launch(rows: usize, n_tok: usize) -> (&'static str, LaunchShape) {
    if n_tok <= MATVEC_MAX_TOKENS {
        ("matvec", shape(rows.div_ceil(4), 128))
    } else {
        (
            "matmul",
            LaunchShape {
                grid: (rows.div_ceil(64) as u32, n_tok.div_ceil(64) as u32, 1),
                block: (256, 1, 1),
                shared_bytes: 0,
            },
        )
    }
}

/// Launches a kernel by name (the backend's, the image encoder's).
pub type Launch<'a> = &'a dyn Fn(&str, LaunchShape, &[Arg]) -> Result<(), GpuError>;

/// `y = x W^T` for `n` rows of `x` (device addresses), plus `bias` on every row: the matrix
/// kernel for `m`'s type and size ([`matrix_launch`]), then `add_rows`.
pub fn launch_project(
    launch: Launch,
    m: &DeviceMatrix,
    x: u64,
    y: u64,
    n: usize,
    bias: Option<&DeviceBuffer>,
) -> Result<(), GpuError> {
    let (family, sh) = matrix_launch(m.rows, n);
    let (rows, cols) = (m.rows as i32, m.cols as i32);
    launch(
        &format!("{family}_{}", m.suffix),
        sh,
        &[
            Arg::Ptr(m.buf.ptr()),
            Arg::Ptr(x),
            Arg::Ptr(y),
            Arg::I32(rows),
            Arg::I32(cols),
            Arg::I32(n as i32),
        ],
    )?;
    if let Some(b) = bias {
        let extra = [Arg::Ptr(b.ptr())];
        launch_elementwise(launch, "add_rows", y, n * m.rows, &extra, Some(m.rows))?;
    }
    Ok(())
}

/// An element-wise kernel over `n` floats at `x`: `(x, extra..., n[, cols])`.
pub fn launch_elementwise(
    launch: Launch,
    name: &str,
    x: u64,
    n: usize,
    extra: &[Arg],
    cols: Option<usize>,
) -> Result<(), GpuError> {
    let mut args = vec![Arg::Ptr(x)];
    args.extend_from_slice(extra);
    args.push(Arg::I32(n as i32));
    if let Some(c) = cols {
        args.push(Arg::I32(c as i32));
    }
    launch(
        name,
        shape(n.div_ceil(ELEMENTWISE as usize), ELEMENTWISE),
        &args,
    )
}

/// Launches on the backend's device, keeping temporary buffers alive until the pass ends.
struct Launcher<'a> {
    b: &'a CudaBackend,
    keep: Vec<DeviceBuffer>,
}

impl Launcher<'_> {
    fn launch(&self, name: &str, shape: LaunchShape, args: &[Arg]) -> Result<(), GpuError> {
        let k = *self
            .b
            .kernels
            .get(name)
            .ok_or_else(|| GpuError::NoKernel(name.to_string()))?;
        self.b.device.launch(k, shape, args)
    }

    /// `y = x W^T` for `n` rows of `x` (device addresses), plus `bias` on every row.
    fn project(
        &self,
        m: &DeviceMatrix,
        x: u64,
        y: u64,
        n: usize,
        bias: Option<&DeviceBuffer>,
    ) -> Result<(), GpuError> {
        launch_project(&|k, sh, a| self.launch(k, sh, a), m, x, y, n, bias)
    }

    /// RMS norm of `rows` rows of `cols` from `x` into `out` (may be `x`).
    fn rms_norm(
        &self,
        x: u64,
        w: &DeviceBuffer,
        out: u64,
        rows: usize,
        cols: usize,
        eps: f32,
    ) -> Result<(), GpuError> {
        self.launch(
            "rms_norm",
            shape(rows, 256),
            &[
                Arg::Ptr(x),
                Arg::Ptr(w.ptr()),
                Arg::Ptr(out),
                Arg::I32(cols as i32),
                Arg::F32(eps),
            ],
        )
    }

    /// An element-wise kernel over `n` floats at `x`: `(x, extra..., n[, cols])`.
    fn elementwise(
        &self,
        name: &str,
        x: u64,
        n: usize,
        extra: &[Arg],
        cols: Option<usize>,
    ) -> Result<(), GpuError> {
        launch_elementwise(&|k, sh, a| self.launch(k, sh, a), name, x, n, extra, cols)
    }

    /// A device buffer holding `bytes` that lives until the pass ends.
    fn temp(&mut self, bytes: &[u8]) -> Result<u64, GpuError> {
        let buf = self.b.device.upload(bytes)?;
        let ptr = buf.ptr();
        self.keep.push(buf);
        Ok(ptr)
    }

    /// An uninitialised device buffer of `floats` f32 that lives until the pass ends.
    fn scratch(&mut self, floats: usize) -> Result<u64, GpuError> {
        let buf = self.b.device.alloc(floats * 4)?;
        let ptr = buf.ptr();
        self.keep.push(buf);
        Ok(ptr)
    }
}

/// Consecutive runs `(start, end)` of batch entries of one sequence.
pub fn sequence_runs(seq: &[usize]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut t = 0;
    while t < seq.len() {
        let end = (t..seq.len())
            .find(|&u| seq[u] != seq[t])
            .unwrap_or(seq.len());
        runs.push((t, end));
        t = end;
    }
    runs
}

/// Runs blocks `pass.layers` over host rows `x` with the sequences' device caches.
pub(super) fn run_blocks(
    b: &CudaBackend,
    model: &Model,
    pass: &Pass,
    caches: &mut [&mut CudaCache],
    x: &mut [f32],
) -> Result<(), GpuError> {
    let cfg = &model.config;
    let batch = pass.batch;
    let n = batch.len();
    let (e, hd) = (cfg.n_embd, cfg.head_dim);
    let (q_dim, kv_dim) = (cfg.q_dim(), cfg.kv_dim());
    let ff = b.blocks.iter().map(|l| l.gate.rows).max().unwrap_or(0);
    let mut l = Launcher {
        b,
        keep: Vec::new(),
    };
    let dx = l.temp(&f32_bytes(x))?;
    let pos: Vec<u8> = batch
        .pos
        .iter()
        .flat_map(|&p| (p as i32).to_le_bytes())
        .collect();
    let dpos = l.temp(&pos)?;
    // M-RoPE: each entry's four position components (time, height, width, extra).
    let sections = cfg.rope_sections.filter(|_| batch.rope_pos.len() == n);
    let dpos4 = match sections {
        Some(_) => {
            let p4: Vec<u8> = batch
                .rope_pos
                .iter()
                .flat_map(|p| p.map(|c| c as i32))
                .flat_map(i32::to_le_bytes)
                .collect();
            l.temp(&p4)?
        }
        None => 0,
    };
    let dh = l.scratch(n * e)?;
    let dq = l.scratch(n * q_dim)?;
    let dk = l.scratch(n * kv_dim)?;
    let dv = l.scratch(n * kv_dim)?;
    let dattn = l.scratch(n * q_dim)?;
    let dgate = l.scratch(n * ff)?;
    let dup = l.scratch(n * ff)?;
    let dout = l.scratch(n * e)?;
    let runs = sequence_runs(&batch.seq);
    let f = 4u64; // bytes per float
    for il in pass.layers.clone() {
        let blk = &b.blocks[il - b.layers.start];
        // Attention block.
        l.rms_norm(dx, &blk.attn_norm, dh, n, e, cfg.rms_eps)?;
        l.project(&blk.wq, dh, dq, n, blk.bq.as_ref())?;
        l.project(&blk.wk, dh, dk, n, blk.bk.as_ref())?;
        l.project(&blk.wv, dh, dv, n, blk.bv.as_ref())?;
        if let (Some(qn), Some(kn)) = (&blk.q_norm, &blk.k_norm) {
            l.rms_norm(dq, qn, dq, n * cfg.n_head, hd, cfg.rms_eps)?;
            l.rms_norm(dk, kn, dk, n * cfg.n_head_kv, hd, cfg.rms_eps)?;
        }
        for &(t, end) in &runs {
            let cache = &mut *caches[batch.seq[t]];
            let rope = model.layer_rope(il, cache.n_ctx_of());
            let theta_scale = rope.freq_base.powf(-2.0 / rope.n_dims as f32);
            let factors = match &rope.freq_factors {
                Some(ff) => l.temp(&f32_bytes(ff))?,
                None => 0,
            };
            let neox = matches!(rope.style, crate::ops::rope::RopeStyle::Neox) as i32;
            for (ptr, heads, dim) in [(dq, cfg.n_head, q_dim), (dk, cfg.n_head_kv, kv_dim)] {
                let shape = LaunchShape {
                    grid: ((end - t) as u32, heads as u32, 1),
                    block: ((rope.n_dims / 2) as u32, 1, 1),
                    shared_bytes: 0,
                };
                let common = [
                    Arg::I32(heads as i32),
                    Arg::I32(hd as i32),
                    Arg::I32(rope.n_dims as i32),
                    Arg::I32(neox),
                    Arg::F32(theta_scale),
                    Arg::F32(rope.freq_scale),
                    Arg::F32(rope.attn_factor),
                ];
                let x = Arg::Ptr(ptr + (t * dim) as u64 * f);
                match sections {
                    Some(s) => {
                        let mut args = vec![x, Arg::Ptr(dpos4 + t as u64 * 16)];
                        args.extend(common);
                        args.extend(s.map(|v| Arg::I32(v as i32)));
                        l.launch("rope_multi", shape, &args)?;
                    }
                    None => {
                        let mut args = vec![x, Arg::Ptr(dpos + t as u64 * 4)];
                        args.extend(common);
                        args.push(Arg::Ptr(factors));
                        l.launch("rope", shape, &args)?;
                    }
                }
            }
            if cfg.scale_query {
                l.elementwise(
                    "scale",
                    dq + (t * q_dim) as u64 * f,
                    (end - t) * q_dim,
                    &[Arg::F32(cfg.attn_scale)],
                    None,
                )?;
            }
            let (kc, vc) = &cache.rows[il - cache.first_layer()];
            l.launch(
                "kv_store",
                shape(end - t, 256),
                &[
                    Arg::Ptr(dk + (t * kv_dim) as u64 * f),
                    Arg::Ptr(dv + (t * kv_dim) as u64 * f),
                    Arg::Ptr(kc.ptr()),
                    Arg::Ptr(vc.ptr()),
                    Arg::Ptr(dpos + t as u64 * 4),
                    Arg::I32(kv_dim as i32),
                ],
            )?;
            for &p in &batch.pos[t..end] {
                cache.mark_filled(p);
            }
        }
        let scale = if cfg.scale_query { 1.0 } else { cfg.attn_scale };
        let window = cfg.layer_window(il).unwrap_or(0);
        for &(t, end) in &runs {
            let cache = &*caches[batch.seq[t]];
            let (kc, vc) = &cache.rows[il - cache.first_layer()];
            // A bidirectional batch: every row of the run sees up to the run's last position.
            let see_until = match batch.bidirectional {
                true => batch.pos[t..end].iter().max().map_or(-1, |&p| p as i32),
                false => -1,
            };
            l.launch(
                "attention",
                LaunchShape {
                    grid: (cfg.n_head as u32, (end - t) as u32, 1),
                    block: (128, 1, 1),
                    shared_bytes: 0,
                },
                &[
                    Arg::Ptr(dq + (t * q_dim) as u64 * f),
                    Arg::Ptr(kc.ptr()),
                    Arg::Ptr(vc.ptr()),
                    Arg::Ptr(dattn + (t * q_dim) as u64 * f),
                    Arg::Ptr(dpos + t as u64 * 4),
                    Arg::I32(cfg.n_head as i32),
                    Arg::I32(cfg.n_head_kv as i32),
                    Arg::I32(hd as i32),
                    Arg::F32(scale),
                    Arg::F32(cfg.attn_softcap.unwrap_or(0.0)),
                    Arg::I32(window as i32),
                    Arg::I32(see_until),
                ],
            )?;
        }
        l.project(&blk.wo, dattn, dh, n, None)?;
        if let Some(w) = &blk.post_attn_norm {
            l.rms_norm(dh, w, dh, n, e, cfg.rms_eps)?;
        }
        l.elementwise("add", dx, n * e, &[Arg::Ptr(dh)], None)?;
        // Feed-forward block.
        l.rms_norm(dx, &blk.ffn_norm, dh, n, e, cfg.rms_eps)?;
        l.project(&blk.gate, dh, dgate, n, None)?;
        l.project(&blk.up, dh, dup, n, None)?;
        let act = match cfg.ffn_act {
            FfnActivation::Silu => "swiglu",
            FfnActivation::Gelu => "geglu",
        };
        l.elementwise(act, dgate, n * blk.gate.rows, &[Arg::Ptr(dup)], None)?;
        l.project(&blk.down, dgate, dout, n, None)?;
        if let Some(w) = &blk.post_ffn_norm {
            l.rms_norm(dout, w, dout, n, e, cfg.rms_eps)?;
        }
        l.elementwise("add", dx, n * e, &[Arg::Ptr(dout)], None)?;
    }
    let mut bytes = vec![0u8; x.len() * 4];
    let dx_buf = &l.keep[0];
    b.device.read(dx_buf, 0, &mut bytes)?;
    x.copy_from_slice(&f32_from_bytes(&bytes));
    Ok(())
}

/// Logits of output-normed host rows `h` with the device's output matrix.
pub(super) fn output_head(
    b: &CudaBackend,
    model: &Model,
    head: &DeviceMatrix,
    h: &[f32],
    logits: &mut [f32],
) -> Result<(), GpuError> {
    let n = h.len() / model.config.n_embd;
    let mut l = Launcher {
        b,
        keep: Vec::new(),
    };
    let dh = l.temp(&f32_bytes(h))?;
    let dl = l.scratch(n * head.rows)?;
    // The final soft-cap is not applied here: the engine applies it on the host to whichever
    // backend's logits (`PlacedModel::output_head`); applying it here too capped them twice.
    l.project(head, dh, dl, n, None)?;
    let mut bytes = vec![0u8; logits.len() * 4];
    b.device.read(&l.keep[1], 0, &mut bytes)?;
    logits.copy_from_slice(&f32_from_bytes(&bytes));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_splits_into_runs_of_one_sequence() {
        assert_eq!(sequence_runs(&[]), vec![]);
        assert_eq!(
            sequence_runs(&[0, 0, 1, 1, 1, 0]),
            vec![(0, 2), (2, 5), (5, 6)]
        );
    }

    #[test]
    fn few_tokens_take_the_matrix_vector_kernel_and_many_the_tiles() {
        let (k, s) = matrix_launch(4097, 1);
        assert_eq!((k, s.grid, s.block), ("matvec", (1025, 1, 1), (128, 1, 1)));
        let (k, _) = matrix_launch(10, MATVEC_MAX_TOKENS);
        assert_eq!(k, "matvec");
        let (k, s) = matrix_launch(4097, 130);
        assert_eq!((k, s.grid, s.block), ("matmul", (65, 3, 1), (256, 1, 1)));
    }

    /// The Rust constant and the kernel's limit agree.
    #[test]
    fn the_token_limit_is_the_kernels() {
        let src = crate::gpu::kernels::MODULES
            .iter()
            .find(|m| m.name == "matvec")
            .unwrap()
            .source;
        assert!(src.contains(&format!("#define MATVEC_MAX_TOKENS {MATVEC_MAX_TOKENS}")));
    }
}
