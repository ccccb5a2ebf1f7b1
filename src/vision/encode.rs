//! The projectors' forward passes, as llama.cpp's clip graphs run them. The tower: patch
//! embedding (the convolution as one matrix product), for `mlp` the class token *after* the
//! patches (the order this llama.cpp version concatenates them in), learned position
//! embeddings, pre-norm if the file has one, the ViT blocks (for `mlp` up to the feature layer),
//! post-norm if the file has one. Then the head: `mlp` takes the rows of positions
//! 1..=n_patches through a two-layer MLP with GELU; `gemma3` average-pools the patch grid,
//! RMS-normalises and projects (`head.rs`); `idefics3` pixel-shuffles and projects.

use super::attention::{attention_into, AttentionBuffers};
use super::clip::{Block, FfnActivation, Head, Linear, Norm, Projector};
use super::layers::{
    add_rows, gelu_in_place, gelu_quick_in_place, layer_norm_rows, matmul_f32, silu_in_place,
};
use super::preprocess::PlanarImage;
use crate::backend::encoder::{
    Activation, BlockRef, EncoderDevice, LinearRef, NormRef, TowerShape,
};
use crate::gguf::GgufFile;
use crate::model::Tensor;
use crate::ops::{matmul, QMat};
use crate::quant::GgmlType;
use std::sync::Arc;

impl Projector {
    /// The image embeddings of `img` (from [`super::preprocess`] for this projector): one row
    /// of [`Projector::n_embd_out`] values per image token, row-major.
    ///
    /// Panics if `img` is not the projector's input size (`preprocess` always makes it so;
    /// `pixtral`'s inputs are whole patches of any size).
    pub fn encode(&self, img: &PlanarImage) -> Vec<f32> {
        if let Head::Pixtral(t) = &self.head {
            return self.encode_pixtral(t, img);
        }
        if let Head::Qwen2vl(t) = &self.head {
            return self.encode_qwen2vl(t, img);
        }
        if let Head::Qwen25vl(t) = &self.head {
            return self.encode_qwen25vl(t, img);
        }
        if let Head::Llama4(t) = &self.head {
            return self.encode_llama4(t, img);
        }
        if let Head::Minicpmv(t) = &self.head {
            return self.encode_minicpmv(t, img);
        }
        let h = &self.hparams;
        assert!(
            img.width == h.image_size && img.height == h.image_size,
            "encode: a {}×{} image for a {} input",
            img.width,
            img.height,
            h.image_size
        );
        let e = h.n_embd;
        let n_patches = h.patches_per_side() * h.patches_per_side();
        let n_pos = n_patches + self.class_embd.is_some() as usize;

        let mut x = vec![0f32; n_pos * e];
        self.embed_patches(img, &mut x[..n_patches * e]);
        if let Some(cls) = &self.class_embd {
            x[n_patches * e..].copy_from_slice(cls);
        }
        for (v, p) in x.iter_mut().zip(&self.pos_embd) {
            *v += p;
        }
        if let Some(ln) = &self.pre_ln {
            layer_norm_rows(&mut x, e, &ln.w, &ln.b, h.eps);
        }

        let depth = h.blocks_run(self.ty);
        let mut stack: Vec<Vec<f32>> = Vec::new();
        let mut il = 0;
        while il < depth {
            if h.feature_layers.contains(&il) {
                stack.push(x.clone());
            }
            // The blocks up to the next layer whose input is kept run as one.
            let end = (il + 1..depth)
                .find(|j| h.feature_layers.contains(j))
                .unwrap_or(depth);
            self.plain_blocks(&self.blocks[il..end], &mut x, n_pos);
            il = end;
        }
        if let Some(ln) = &self.post_ln {
            layer_norm_rows(&mut x, e, &ln.w, &ln.b, h.eps);
        }
        let Head::Mlp { mm0, mm2 } = &self.head else {
            return self.siglip_head(&x);
        };
        if h.feature_layers.contains(&depth) {
            stack.push(x.clone());
        }
        let (features, width) = match stack.len() {
            0 => (x, e),
            1 => (stack.pop().expect("one entry"), e),
            k => {
                let mut cat = vec![0f32; n_pos * e * k];
                for (row, dst) in cat.chunks_exact_mut(e * k).enumerate() {
                    for (part, s) in dst.chunks_exact_mut(e).zip(&stack) {
                        part.copy_from_slice(&s[row * e..][..e]);
                    }
                }
                (cat, e * k)
            }
        };
        // The patch rows: positions 1..=n_patches when there is a class token (llama.cpp skips
        // row 0 to stay in bounds, whatever sits there), else all of them.
        let skip = self.class_embd.is_some() as usize;
        let rows = &features[skip * width..(skip + n_patches) * width];
        let mut hidden = self.linear(mm0, rows, n_patches);
        gelu_in_place(&mut hidden);
        self.linear(mm2, &hidden, n_patches)
    }

    /// The convolution of `patch_size` stride over the image (see [`conv_patches`]), plus the
    /// patch bias if the file has one.
    pub(super) fn embed_patches(&self, img: &PlanarImage, out: &mut [f32]) {
        let h = &self.hparams;
        conv_patches(
            &self.file,
            &self.patch_embd,
            img,
            h.patch_size,
            h.n_embd,
            out,
        );
        if let Some(b) = &self.patch_bias {
            add_rows(out, b);
        }
    }

    /// `blocks` (LayerNorm ViT blocks without a RoPE) one after another on `x` (`n × n_embd`)
    /// in place: all on the encoder's device when it takes them, else one by one here.
    pub(super) fn plain_blocks(&self, blocks: &[Block], x: &mut [f32], n: usize) {
        if let Some(device) = &self.device {
            let h = &self.hparams;
            let shape = TowerShape {
                n_head: h.n_head,
                eps: h.eps,
                act: match h.ffn_act {
                    FfnActivation::Gelu => Activation::Gelu,
                    FfnActivation::GeluQuick => Activation::GeluQuick,
                    FfnActivation::Silu => Activation::Silu,
                },
            };
            let refs: Vec<BlockRef> = blocks.iter().map(|b| self.block_ref(b)).collect();
            if device.blocks(&refs, shape, x, n) {
                return;
            }
        }
        let mut scratch = BlockScratch::default();
        for b in blocks {
            self.block(b, x, n, None, &mut scratch);
        }
    }

    /// `b`'s weights as the encoder's device reads them.
    fn block_ref<'a>(&'a self, b: &'a Block) -> BlockRef<'a> {
        let linear = |l: &'a Linear| LinearRef {
            w: l.w.mat(&self.file),
            b: l.b.as_deref(),
        };
        let norm = |n: &'a Norm| NormRef { w: &n.w, b: &n.b };
        BlockRef {
            ln1: norm(&b.ln1),
            q: linear(&b.q),
            k: linear(&b.k),
            v: linear(&b.v),
            o: linear(&b.o),
            ln2: norm(&b.ln2),
            up: linear(&b.up),
            down: linear(&b.down),
        }
    }

    /// One LayerNorm ViT block on `x` (`n × n_embd`) in place, the queries and keys turned by
    /// `rotate` where the tower has a RoPE (Qwen2-VL, Llama 4); its steps write into `s`.
    pub(super) fn block(
        &self,
        b: &Block,
        x: &mut [f32],
        n: usize,
        rotate: Option<Rotate>,
        s: &mut BlockScratch,
    ) {
        let h = &self.hparams;
        let e = h.n_embd;
        s.cur.clear();
        s.cur.extend_from_slice(x);
        layer_norm_rows(&mut s.cur, e, &b.ln1.w, &b.ln1.b, h.eps);
        self.linear_into(&b.q, &s.cur, n, &mut s.q);
        self.linear_into(&b.k, &s.cur, n, &mut s.k);
        self.linear_into(&b.v, &s.cur, n, &mut s.v);
        if let Some(rotate) = rotate {
            rotate(&mut s.q);
            rotate(&mut s.k);
        }
        let scale = 1.0 / ((e / h.n_head) as f32).sqrt();
        self.attend_into(
            &s.q,
            &s.k,
            &s.v,
            n,
            h.n_head,
            scale,
            &mut s.bufs,
            &mut s.att,
        );
        self.linear_into(&b.o, &s.att, n, &mut s.o);
        for (xv, ov) in x.iter_mut().zip(&s.o) {
            *xv += ov;
        }
        s.cur.copy_from_slice(x);
        layer_norm_rows(&mut s.cur, e, &b.ln2.w, &b.ln2.b, h.eps);
        self.linear_into(&b.up, &s.cur, n, &mut s.up);
        match h.ffn_act {
            FfnActivation::Gelu => gelu_in_place(&mut s.up),
            FfnActivation::GeluQuick => gelu_quick_in_place(&mut s.up),
            FfnActivation::Silu => silu_in_place(&mut s.up),
        }
        self.linear_into(&b.down, &s.up, n, &mut s.o);
        for (xv, dv) in x.iter_mut().zip(&s.o) {
            *xv += dv;
        }
    }

    /// `x · Wᵀ + b` for `n` rows of `x`, the product on the encoder's device when it takes it.
    pub(super) fn linear(&self, l: &Linear, x: &[f32], n: usize) -> Vec<f32> {
        let mut out = Vec::new();
        self.linear_into(l, x, n, &mut out);
        out
    }

    /// [`Projector::linear`] into `out`, resized to `n` rows (every value is written).
    fn linear_into(&self, l: &Linear, x: &[f32], n: usize, out: &mut Vec<f32>) {
        let w = l.w.mat(&self.file);
        out.resize(n * w.rows, 0.0);
        let on_device = self
            .device
            .as_ref()
            .is_some_and(|d| d.matmul(&w, x, n, out));
        if !on_device {
            matmul(&w, x, n, out);
        }
        if let Some(b) = &l.b {
            add_rows(out, b);
        }
    }
}

/// The buffers a ViT block's steps write into, kept from block to block of a pass: a tower's
/// activations are large enough that fresh ones come from `mmap`, and faulting their pages in
/// (zeroed by the kernel, on the calling thread while the pool's workers wait) cost about a
/// tenth of a SigLIP-base encode on two threads.
#[derive(Default)]
pub(super) struct BlockScratch {
    cur: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    bufs: AttentionBuffers,
    o: Vec<f32>,
    up: Vec<f32>,
}

impl Projector {
    /// Self-attention over all `n` positions ([`attention_into`]), on the encoder's device when it
    /// takes it.
    pub(super) fn attend(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        n: usize,
        n_head: usize,
        scale: f32,
    ) -> Vec<f32> {
        let mut out = Vec::new();
        let mut bufs = AttentionBuffers::default();
        self.attend_into(q, k, v, n, n_head, scale, &mut bufs, &mut out);
        out
    }

    /// [`Projector::attend`] into `out`, the CPU's working memory in `bufs`.
    #[allow(clippy::too_many_arguments)]
    fn attend_into(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        n: usize,
        n_head: usize,
        scale: f32,
        bufs: &mut AttentionBuffers,
        out: &mut Vec<f32>,
    ) {
        match self
            .device
            .as_ref()
            .and_then(|d| d.attention(q, k, v, n, n_head, scale))
        {
            Some(att) => *out = att,
            None => attention_into(q, k, v, n, n_head, scale, bufs, out),
        }
    }

    /// Runs the matrix products and attention on `device` from now on (`None`: the CPU).
    pub fn set_device(&mut self, device: Option<Arc<dyn EncoderDevice>>) {
        self.device = device;
    }

    /// The device the encoder's heavy steps run on, if not the CPU.
    pub fn device_name(&self) -> Option<String> {
        self.device.as_ref().map(|d| d.name())
    }
}

/// A RoPE turning the query or key rows of a block in place.
pub(super) type Rotate<'a> = &'a dyn Fn(&mut [f32]);

/// The convolution of `p` stride over `img` (whose sides are whole patches) with `kernel` (`e`
/// outputs), as a product of each patch (channels, then rows, then columns, as ggml's im2col
/// lays them out) with the kernel; the patches row by row into `out`.
pub(super) fn conv_patches(
    file: &GgufFile,
    kernel: &Tensor,
    img: &PlanarImage,
    p: usize,
    e: usize,
    out: &mut [f32],
) {
    let (cols, rows) = (img.width / p, img.height / p);
    let k = 3 * p * p;
    let plane = img.width * img.height;
    let mut patches = vec![0f32; cols * rows * k];
    for (pi, dst) in patches.chunks_exact_mut(k).enumerate() {
        let (py, px) = (pi / cols, pi % cols);
        for c in 0..3 {
            for ky in 0..p {
                let src = c * plane + (py * p + ky) * img.width + px * p;
                dst[(c * p + ky) * p..][..p].copy_from_slice(&img.data[src..][..p]);
            }
        }
    }
    let info = &kernel.info;
    let data = file.tensor_data(info);
    if info.ty == GgmlType::F32 {
        // SigLIP's converters keep the kernel in f32.
        let w: Vec<f32> = data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        matmul_f32(&w, e, &patches, cols * rows, out);
    } else {
        let m = QMat {
            ty: info.ty,
            rows: e,
            cols: k,
            data,
            x8: None,
        };
        matmul(&m, &patches, cols * rows, out);
    }
}
