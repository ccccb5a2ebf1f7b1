//! The image encoder on the GPU ([`CudaEncoder`], the [`EncoderDevice`] of a projector when
//! `--mmproj-offload` holds and a GPU was found). Runs of plain ViT blocks (CLIP's, SigLIP's:
//! LLaVA, Gemma 3, SmolVLM) go up whole: the rows are uploaded once, every step of every block
//! runs as kernel launches (layer norm, the projections and their biases, attention, the
//! activation, the residual adds), and the rows come back at the end. Towers with a RoPE or an
//! RMS norm (Pixtral, Qwen2-VL, Qwen2.5-VL, Llama 4) send their matrix products and full
//! attention one at a time instead, the rest of each block staying on the CPU. Each weight
//! matrix goes up once, in its GGUF block layout, the first time it is used (norms and biases
//! as f32), and the text backend's matrix kernels read it. Attention stores keys and values as
//! f16 rows (as llama.cpp's CUDA encoder does in its flash attention) and runs the text
//! backend's attention kernel with every query seeing every key (its bidirectional mode). A
//! matrix whose type has no kernel (BF16) keeps its step, or its run of blocks, on the CPU; a
//! device failure is said once and every later step runs on the CPU.

use crate::backend::encoder::{Activation, BlockRef, EncoderDevice, LinearRef, TowerShape};
use crate::gpu::backend::{
    check_matrix, f32_bytes, f32_from_bytes, launch_elementwise, launch_project, shape,
    DeviceMatrix,
};
use crate::gpu::{Arg, Device, DeviceBuffer, GpuError, Kernel, LaunchShape};
use crate::ops::QMat;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Widest attention head the kernel takes (attention.cu's shared query row).
const MAX_HEAD_DIM: usize = 256;

/// Where host data lives (its address and length): the caches' key.
type Address = (usize, usize);

/// A matrix and its bias on the device.
type OnDevice = (Arc<DeviceMatrix>, Option<Arc<DeviceBuffer>>);

/// The encoder's steps on one GPU, for one projector: its caches know the projector's weights
/// by their addresses (in the mapped file, or the projector's own vectors), which stay put as
/// long as the projector lives; another projector needs its own `CudaEncoder`.
pub struct CudaEncoder {
    device: Device,
    /// Each matrix by its bytes' address and length in the mapped file: on the device, or
    /// `None` when it stays on the CPU.
    weights: Mutex<HashMap<Address, Option<Arc<DeviceMatrix>>>>,
    /// Norm weights and biases by their address and length, on the device.
    vectors: Mutex<HashMap<Address, Arc<DeviceBuffer>>>,
    kernels: Mutex<HashMap<String, Kernel>>,
    /// Set after a device failure: every later step declines.
    failed: AtomicBool,
}

impl CudaEncoder {
    pub fn new(device: &Device) -> CudaEncoder {
        CudaEncoder {
            device: device.clone(),
            weights: Mutex::new(HashMap::new()),
            vectors: Mutex::new(HashMap::new()),
            kernels: Mutex::new(HashMap::new()),
            failed: AtomicBool::new(false),
        }
    }

    /// `w` on the device (uploaded the first time), or `None` when the kernels do not read it.
    fn matrix(&self, w: &QMat) -> Result<Option<Arc<DeviceMatrix>>, GpuError> {
        let key = (w.data.as_ptr() as usize, w.data.len());
        let mut weights = self.weights.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = weights.get(&key) {
            return Ok(m.clone());
        }
        let m = match check_matrix("projector matrix", w) {
            Err(_) => None,
            Ok(suffix) => Some(Arc::new(DeviceMatrix {
                buf: self.device.upload(w.data)?,
                rows: w.rows,
                cols: w.cols,
                suffix,
            })),
        };
        weights.insert(key, m.clone());
        Ok(m)
    }

    fn launch(&self, name: &str, shape: LaunchShape, args: &[Arg]) -> Result<(), GpuError> {
        let kernel = {
            let mut kernels = self.kernels.lock().unwrap_or_else(|e| e.into_inner());
            match kernels.get(name) {
                Some(k) => *k,
                None => {
                    let k = self.device.kernel(name)?;
                    kernels.insert(name.to_string(), k);
                    k
                }
            }
        };
        self.device.launch(kernel, shape, args)
    }

    /// `v` on the device (uploaded the first time).
    fn vector(&self, v: &[f32]) -> Result<Arc<DeviceBuffer>, GpuError> {
        let key = (v.as_ptr() as usize, v.len());
        let mut vectors = self.vectors.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = vectors.get(&key) {
            return Ok(b.clone());
        }
        let b = Arc::new(self.device.upload(&f32_bytes(v))?);
        vectors.insert(key, b.clone());
        Ok(b)
    }

    /// `y = x m^T (+ bias)` for `n` rows, device addresses.
    fn project(
        &self,
        m: &DeviceMatrix,
        bias: Option<&DeviceBuffer>,
        x: u64,
        y: u64,
        n: usize,
    ) -> Result<(), GpuError> {
        launch_project(&|k, sh, a| self.launch(k, sh, a), m, x, y, n, bias)
    }

    /// An element-wise kernel over `len` floats at `x`: `(x, extra..., len)`.
    fn elementwise(&self, name: &str, x: u64, len: usize, extra: &[Arg]) -> Result<(), GpuError> {
        launch_elementwise(&|k, sh, a| self.launch(k, sh, a), name, x, len, extra, None)
    }

    /// Multi-head attention of `n` query rows `q` over `n` key and value rows, each seeing all
    /// of them (the kernel's `see_until`), into `out`; `s` holds the f16 rows and positions.
    fn attend(
        &self,
        s: &Scratch,
        q: u64,
        k: u64,
        v: u64,
        out: u64,
        at: Attend,
    ) -> Result<(), GpuError> {
        let Attend {
            n,
            n_head,
            width,
            scale,
        } = at;
        self.launch(
            "kv_store",
            shape(n, 256),
            &[
                Arg::Ptr(k),
                Arg::Ptr(v),
                Arg::Ptr(s.k16.ptr()),
                Arg::Ptr(s.v16.ptr()),
                Arg::Ptr(s.rows.ptr()),
                Arg::I32(width as i32),
            ],
        )?;
        self.launch(
            "attention",
            LaunchShape {
                grid: (n_head as u32, n as u32, 1),
                block: (128, 1, 1),
                shared_bytes: 0,
            },
            &[
                Arg::Ptr(q),
                Arg::Ptr(s.k16.ptr()),
                Arg::Ptr(s.v16.ptr()),
                Arg::Ptr(out),
                Arg::Ptr(s.rows.ptr()),
                Arg::I32(n_head as i32),
                Arg::I32(n_head as i32),
                Arg::I32((width / n_head) as i32),
                Arg::F32(scale),
                Arg::F32(0.0),
                Arg::I32(0),
                Arg::I32(n as i32 - 1),
            ],
        )
    }

    fn try_matmul(&self, w: &QMat, x: &[f32], n: usize, out: &mut [f32]) -> Result<bool, GpuError> {
        let Some(m) = self.matrix(w)? else {
            return Ok(false);
        };
        let xd = self.device.upload(&f32_bytes(&x[..n * m.cols]))?;
        let yd = self.device.alloc(n * m.rows * 4)?;
        self.project(&m, None, xd.ptr(), yd.ptr(), n)?;
        read_into(&self.device, &yd, &mut out[..n * m.rows])?;
        Ok(true)
    }

    fn try_attention(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        n: usize,
        n_head: usize,
        scale: f32,
    ) -> Result<Option<Vec<f32>>, GpuError> {
        let width = q.len() / n;
        if !head_fits(width, n_head) {
            return Ok(None);
        }
        let dev = &self.device;
        let (qd, kd, vd) = (
            dev.upload(&f32_bytes(q))?,
            dev.upload(&f32_bytes(k))?,
            dev.upload(&f32_bytes(v))?,
        );
        let s = Scratch::new(dev, n, width)?;
        let out = dev.alloc(n * width * 4)?;
        let at = Attend {
            n,
            n_head,
            width,
            scale,
        };
        self.attend(&s, qd.ptr(), kd.ptr(), vd.ptr(), out.ptr(), at)?;
        let mut rows = vec![0f32; n * width];
        read_into(dev, &out, &mut rows)?;
        Ok(Some(rows))
    }

    /// `m` on the device, or `None` when the kernels do not read it.
    fn linear(&self, l: &LinearRef) -> Result<Option<OnDevice>, GpuError> {
        let Some(m) = self.matrix(&l.w)? else {
            return Ok(None);
        };
        let b = l.b.map(|b| self.vector(b)).transpose()?;
        Ok(Some((m, b)))
    }

    fn try_blocks(
        &self,
        blocks: &[BlockRef],
        tower: TowerShape,
        x: &mut [f32],
        n: usize,
    ) -> Result<bool, GpuError> {
        let Some(first) = blocks.first() else {
            return Ok(true);
        };
        let e = first.q.w.cols;
        if !head_fits(e, tower.n_head) || x.len() != n * e {
            return Ok(false);
        }
        // Every matrix on the device first: any the kernels do not read keeps the run here.
        let mut up_rows = 0;
        let mut weights = Vec::with_capacity(blocks.len());
        for b in blocks {
            let mut ms = Vec::with_capacity(6);
            for l in [&b.q, &b.k, &b.v, &b.o, &b.up, &b.down] {
                match self.linear(l)? {
                    Some(m) => ms.push(m),
                    None => return Ok(false),
                }
            }
            let norms = [
                self.vector(b.ln1.w)?,
                self.vector(b.ln1.b)?,
                self.vector(b.ln2.w)?,
                self.vector(b.ln2.b)?,
            ];
            up_rows = up_rows.max(b.up.w.rows);
            weights.push((ms, norms));
        }
        let dev = &self.device;
        let floats = |k: usize| dev.alloc(k * 4);
        let xd = dev.upload(&f32_bytes(x))?;
        let (cur, q, k, v, att, tmp) = (
            floats(n * e)?,
            floats(n * e)?,
            floats(n * e)?,
            floats(n * e)?,
            floats(n * e)?,
            floats(n * e)?,
        );
        let up = floats(n * up_rows)?;
        let s = Scratch::new(dev, n, e)?;
        let at = Attend {
            n,
            n_head: tower.n_head,
            width: e,
            scale: 1.0 / ((e / tower.n_head) as f32).sqrt(),
        };
        let norm = |w: &DeviceBuffer, b: &DeviceBuffer| {
            self.launch(
                "layer_norm",
                shape(n, 256),
                &[
                    Arg::Ptr(xd.ptr()),
                    Arg::Ptr(w.ptr()),
                    Arg::Ptr(b.ptr()),
                    Arg::Ptr(cur.ptr()),
                    Arg::I32(e as i32),
                    Arg::F32(tower.eps),
                ],
            )
        };
        let act = match tower.act {
            Activation::Gelu => "gelu",
            Activation::GeluQuick => "gelu_quick",
            Activation::Silu => "silu",
        };
        for (ms, [ln1w, ln1b, ln2w, ln2b]) in &weights {
            let [wq, wk, wv, wo, wup, wdown] = [0, 1, 2, 3, 4, 5].map(|i| &ms[i]);
            let p = |(m, b): &OnDevice, x: u64, y: u64| self.project(m, b.as_deref(), x, y, n);
            norm(ln1w, ln1b)?;
            p(wq, cur.ptr(), q.ptr())?;
            p(wk, cur.ptr(), k.ptr())?;
            p(wv, cur.ptr(), v.ptr())?;
            self.attend(&s, q.ptr(), k.ptr(), v.ptr(), att.ptr(), at)?;
            p(wo, att.ptr(), tmp.ptr())?;
            self.elementwise("add", xd.ptr(), n * e, &[Arg::Ptr(tmp.ptr())])?;
            norm(ln2w, ln2b)?;
            p(wup, cur.ptr(), up.ptr())?;
            self.elementwise(act, up.ptr(), n * wup.0.rows, &[])?;
            p(wdown, up.ptr(), tmp.ptr())?;
            self.elementwise("add", xd.ptr(), n * e, &[Arg::Ptr(tmp.ptr())])?;
        }
        read_into(dev, &xd, x)?;
        Ok(true)
    }

    /// `r`'s value, or after a device failure (said once) `declined` from now on.
    fn or_decline<T>(&self, r: Result<T, GpuError>, declined: T) -> T {
        match r {
            Ok(v) => v,
            Err(e) => {
                if !self.failed.swap(true, Ordering::Relaxed) {
                    eprintln!("gpu: the image encoder failed on the device ({e}); encoding on the CPU from now on");
                }
                declined
            }
        }
    }
}

impl EncoderDevice for CudaEncoder {
    fn matmul(&self, w: &QMat, x: &[f32], n: usize, out: &mut [f32]) -> bool {
        if self.failed.load(Ordering::Relaxed) || n == 0 {
            return false;
        }
        let r = self.try_matmul(w, x, n, out);
        self.or_decline(r, false)
    }

    fn attention(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        n: usize,
        n_head: usize,
        scale: f32,
    ) -> Option<Vec<f32>> {
        if self.failed.load(Ordering::Relaxed) || n == 0 {
            return None;
        }
        let r = self.try_attention(q, k, v, n, n_head, scale);
        self.or_decline(r, None)
    }

    fn blocks(&self, blocks: &[BlockRef], tower: TowerShape, x: &mut [f32], n: usize) -> bool {
        if self.failed.load(Ordering::Relaxed) || n == 0 {
            return false;
        }
        let r = self.try_blocks(blocks, tower, x, n);
        self.or_decline(r, false)
    }

    fn name(&self) -> String {
        self.device.info().name.clone()
    }
}

/// The shape of one attention call.
#[derive(Clone, Copy)]
struct Attend {
    n: usize,
    n_head: usize,
    width: usize,
    scale: f32,
}

/// Attention's device scratch for `n` rows of `width`: keys and values as f16 rows and each
/// row's position (`0..n`).
struct Scratch {
    k16: DeviceBuffer,
    v16: DeviceBuffer,
    rows: DeviceBuffer,
}

impl Scratch {
    fn new(dev: &Device, n: usize, width: usize) -> Result<Scratch, GpuError> {
        let rows: Vec<u8> = (0..n as i32).flat_map(|p| p.to_le_bytes()).collect();
        Ok(Scratch {
            k16: dev.alloc(n * width * 2)?,
            v16: dev.alloc(n * width * 2)?,
            rows: dev.upload(&rows)?,
        })
    }
}

/// Whether `n_head` heads split `width` into heads the attention kernel takes.
fn head_fits(width: usize, n_head: usize) -> bool {
    n_head > 0 && width.is_multiple_of(n_head) && width / n_head <= MAX_HEAD_DIM
}

/// `buf`'s first `out.len()` floats into `out`.
fn read_into(dev: &Device, buf: &DeviceBuffer, out: &mut [f32]) -> Result<(), GpuError> {
    let mut bytes = vec![0u8; out.len() * 4];
    dev.read(buf, 0, &mut bytes)?;
    out.copy_from_slice(&f32_from_bytes(&bytes));
    Ok(())
}
