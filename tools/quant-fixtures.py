#!/usr/bin/env python3
"""Writes tests/data/quant/<type>.bin (random raw blocks) and <type>.f32 (their values as
dequantized by the `gguf` Python package, little-endian f32) for the Rust dequantization tests,
and quantize_src.f32 with <type>.quant.bin (that input quantized by the package) for the weight
quantizer tests.

Usage: pip install gguf numpy && python3 tools/quant-fixtures.py [out_dir]

Quant bytes are uniformly random; the f16 scale fields are overwritten with moderate values
drawn from a normal distribution so that no block decodes to NaN or infinity. The seed is fixed,
so rerunning reproduces the committed files as long as the package's dequantizers are unchanged.
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

N_BLOCKS = 12
SEED = 20240607

# type name -> (ggml type, bytes per block, byte offsets of f16 scale fields)
FORMATS = {
    "q4_0": (T.Q4_0, 18, [0]),
    "q4_1": (T.Q4_1, 20, [0, 2]),
    "q5_0": (T.Q5_0, 22, [0]),
    "q5_1": (T.Q5_1, 24, [0, 2]),
    "q8_0": (T.Q8_0, 34, [0]),
    "q2_K": (T.Q2_K, 84, [80, 82]),
    "q3_K": (T.Q3_K, 110, [108]),
    "q4_K": (T.Q4_K, 144, [0, 2]),
    "q5_K": (T.Q5_K, 176, [0, 2]),
    "q6_K": (T.Q6_K, 210, [208]),
}


def sane_f16(rng, n):
    """n moderate f16 values (|x| roughly 1e-3 .. 3), as raw bytes."""
    return (rng.normal(0.0, 0.5, n) * 10.0 ** rng.uniform(-2, 0, n)).astype("<f2")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "data", "quant")
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(SEED)

    for name, (qtype, size, scale_offsets) in FORMATS.items():
        raw = rng.integers(0, 256, size=(N_BLOCKS, size), dtype=np.uint8)
        for off in scale_offsets:
            raw[:, off:off + 2] = sane_f16(rng, N_BLOCKS).view(np.uint8).reshape(N_BLOCKS, 2)
        values = dequantize(raw.reshape(-1), qtype).astype("<f4")
        assert np.all(np.isfinite(values)), name
        write(out, name, raw.tobytes(), values.tobytes())

    # Float types: 256 random elements each, with a few special values.
    f = rng.normal(0.0, 1.0, 256).astype(np.float32) * np.float32(10.0) ** rng.uniform(-4, 4, 256).astype(np.float32)
    f[:4] = [0.0, -0.0, 1.0, -2.5]
    f16 = f.astype("<f2")
    write(out, "f16", f16.tobytes(), dequantize(f16.view(np.uint8), T.F16).astype("<f4").tobytes())
    bf16 = (f.view(np.uint32) >> 16).astype("<u2")
    write(out, "bf16", bf16.tobytes(), dequantize(bf16.view(np.uint8), T.BF16).astype("<f4").tobytes())

    # Weight quantizers the package implements bit-exactly like ggml's reference C:
    # quantize_src.f32 (shared input, 12 blocks of 32) -> <type>.quant.bin.
    src = (rng.normal(0.0, 1.0, (N_BLOCKS, 32)) * 10.0 ** rng.uniform(-3, 1, (N_BLOCKS, 1))).astype("<f4")
    src[0, 5] = 0.0
    src[1, :] = 0.0  # an all-zero block
    with open(os.path.join(out, "quantize_src.f32"), "wb") as fh:
        fh.write(src.tobytes())
    for qtype, name in [(T.Q4_0, "q4_0"), (T.Q4_1, "q4_1"), (T.Q5_0, "q5_0"), (T.Q5_1, "q5_1"),
                        (T.Q8_0, "q8_0"), (T.BF16, "bf16"), (T.F16, "f16")]:
        q = quantize(src.reshape(-1), qtype)
        with open(os.path.join(out, name + ".quant.bin"), "wb") as fh:
            fh.write(np.ascontiguousarray(q).view(np.uint8).tobytes())


def write(out, name, blocks, values):
    with open(os.path.join(out, name + ".bin"), "wb") as fh:
        fh.write(blocks)
    with open(os.path.join(out, name + ".f32"), "wb") as fh:
        fh.write(values)
    print(f"{name}: {len(blocks)} block bytes, {len(values) // 4} values")


if __name__ == "__main__":
    main()
