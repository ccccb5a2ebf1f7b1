#!/usr/bin/env python3
"""NumPy reference of llama.cpp's LLaVA (`mlp`) vision encoder, for tests/vision_encoder.rs.

    vision_reference.py MMPROJ.gguf IMAGE.rgb OUT.f32

IMAGE.rgb is raw 8-bit RGB of the projector's input size (no resizing here). The math is
written out from llama.cpp's clip graph: normalise, patch convolution, class token after the
patches, learned positions, pre-LayerNorm, blocks 0..n_layer-2 (LayerNorm, attention with
biases, quick GELU FFN), the rows of positions 1..n_patches, then mm.0, GELU (tanh), mm.2.
Matrices multiply in float64; where the weights are f16, activations are first rounded to f16,
as ggml's kernels convert them. OUT gets n_patches x n_embd_text float32 values.
"""

import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main():
    mmproj, image, out = sys.argv[1:4]
    r = GGUFReader(mmproj)

    def kv(key):
        f = r.fields[key]
        if len(f.types) > 1:
            return [f.parts[i][0].item() for i in f.data]
        return f.parts[f.data[0]][0].item()

    tensors = {t.name: t for t in r.tensors}

    def get(name):
        t = tensors[name]
        x = dequantize(t.data, t.tensor_type).astype(np.float64)
        return x.reshape([int(d) for d in reversed(t.shape)]), t.tensor_type.name

    size, ps = kv("clip.vision.image_size"), kv("clip.vision.patch_size")
    e, nh = kv("clip.vision.embedding_length"), kv("clip.vision.attention.head_count")
    n_layer, eps = kv("clip.vision.block_count"), kv("clip.vision.attention.layer_norm_epsilon")
    mean, std = np.array(kv("clip.vision.image_mean")), np.array(kv("clip.vision.image_std"))
    mean, std = mean.astype(np.float32), std.astype(np.float32)

    def act_round(x, ty):
        return x.astype(np.float16).astype(np.float64) if ty == "F16" else x

    def linear(x, prefix):
        w, ty = get(prefix + ".weight")
        y = act_round(x, ty) @ w.T
        if prefix + ".bias" in tensors:
            y = y + get(prefix + ".bias")[0]
        return y

    def norm(x, prefix):
        mu = x.mean(axis=1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * get(prefix + ".weight")[0] + get(prefix + ".bias")[0]

    def f16_table(f, x):
        # ggml evaluates these activations through f16 tables: f16 in, f16 out.
        h = x.astype(np.float16).astype(np.float64)
        return f(h).astype(np.float16).astype(np.float64)

    def gelu_quick(x):
        return f16_table(lambda h: h / (1.0 + np.exp(-1.702 * h)), x)

    def gelu(x):
        y = f16_table(lambda h: 0.5 * h * (1 + np.tanh(0.7978845608 * h * (1 + 0.044715 * h * h))), x)
        return np.where(x <= -10, 0.0, np.where(x >= 10, x, y))

    rgb = np.fromfile(image, dtype=np.uint8).reshape(size, size, 3)
    px = (rgb.astype(np.float32) / np.float32(255) - mean) / std  # as clip computes it, in f32
    planar = px.transpose(2, 0, 1).astype(np.float64)  # [3, H, W]
    side = size // ps
    patches = planar.reshape(3, side, ps, side, ps).transpose(1, 3, 0, 2, 4).reshape(side * side, 3 * ps * ps)
    kernel, kty = get("v.patch_embd.weight")
    x = act_round(patches, kty) @ kernel.reshape(e, -1).T
    x = np.concatenate([x, get("v.class_embd")[0][None, :]], axis=0)
    x = x + get("v.position_embd.weight")[0]
    x = norm(x, "v.pre_ln")
    n = x.shape[0]
    d = e // nh
    for il in range(n_layer - 1):
        b = f"v.blk.{il}."
        h = norm(x, b + "ln1")
        q, k, v = (linear(h, b + p).reshape(n, nh, d).transpose(1, 0, 2) for p in ("attn_q", "attn_k", "attn_v"))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
        s = np.exp(s - s.max(axis=2, keepdims=True))
        s = s / s.sum(axis=2, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(n, e)
        x = x + linear(a, b + "attn_out")
        h = norm(x, b + "ln2")
        x = x + linear(gelu_quick(linear(h, b + "ffn_up")), b + "ffn_down")
    rows = x[1 : 1 + side * side]
    y = linear(gelu(linear(rows, "mm.0")), "mm.2")
    y.astype(np.float32).tofile(out)


if __name__ == "__main__":
    main()
