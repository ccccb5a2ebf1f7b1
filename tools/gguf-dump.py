#!/usr/bin/env python3
"""Dumps a GGUF file as the `gguf` Python package (llama.cpp's own reader) sees it, as JSON on
stdout: version, alignment, data offset, every metadata key with its type ids and value, and every
tensor's name, type id, dimensions (innermost first) and absolute data offset.

tests/gguf_differential.rs compares our reader with this on the test models.

usage: tools/gguf-dump.py MODEL.gguf
"""
import json
import math
import sys

from gguf import GGUFReader


def plain(value):
    """JSON-safe form of a metadata value: floats that JSON cannot carry become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gguf-dump.py MODEL.gguf")
    reader = GGUFReader(sys.argv[1])
    version = int(reader.fields["GGUF.version"].contents())
    metadata = []
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        metadata.append(
            {"key": key, "types": [int(t) for t in field.types], "value": plain(field.contents())}
        )
    tensors = [
        {
            "name": t.name,
            "type": int(t.tensor_type),
            "dims": [int(d) for d in t.shape],
            "offset": int(t.data_offset),
        }
        for t in reader.tensors
    ]
    json.dump(
        {
            "version": version,
            "alignment": int(reader.alignment),
            "data_offset": int(reader.data_offset),
            "metadata": metadata,
            "tensors": tensors,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
