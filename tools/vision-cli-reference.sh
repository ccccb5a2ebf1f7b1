#!/usr/bin/env bash
# Regenerates tests/data/vision/cli.json: llama-mtmd-cli's greedy text for the synthetic LLaVA
# pair (tools/synth-model.py llava f16 + --mmproj llava q8_0) and the 84×84 test picture, for the
# prompts tests/vision_cli.rs runs through our CLI. Needs llama-mtmd-cli (built by
# ../shared/bench/build-llama-cpp.sh), python3 with gguf, and SmolLM2-135M-Instruct.Q4_1.gguf
# for the vocabulary.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${LLAMA_CPP_BIN:-$HOME/.cache/llama-cpp-ref/bin}
vocab=${LLAMAFILE_MODELS:-$HOME/.cache/llamafile-rs/models}/SmolLM2-135M-Instruct.Q4_1.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$here/tools/synth-model.py" llava f16 "$tmp/text.gguf" --vocab-from "$vocab"
python3 "$here/tools/synth-model.py" --mmproj llava q8_0 "$tmp/mmproj.gguf"
# The test picture (tests/common/picture.rs) as an 8-bit RGB PNG.
python3 - "$tmp/picture.png" <<'PY'
import struct, sys, zlib
w = h = 84
rows = b""
for y in range(h):
    row = bytearray([0])
    for x in range(w):
        row += bytes([x * 255 // (w - 1), y * 255 // (h - 1), 230 if (x // 9 + y // 7) % 2 == 0 else 20])
    rows += bytes(row)
def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) \
    + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
open(sys.argv[1], "wb").write(png)
PY
run() { # PROMPT N_IMAGES
    local imgs=()
    for _ in $(seq "$2"); do imgs+=(--image "$tmp/picture.png"); done
    LD_LIBRARY_PATH="$bin" "$bin/llama-mtmd-cli" -m "$tmp/text.gguf" --mmproj "$tmp/mmproj.gguf" \
        "${imgs[@]}" -p "$1" -n 12 --temp 0 -t 2 -fa off --chat-template vicuna 2>/dev/null \
        | python3 -c 'import sys; print(sys.stdin.read().strip("\n"), end="")'
}
python3 - "$here/tests/data/vision/cli.json" \
    "$(run 'Describe.' 1)" "$(run 'Look: <__media__> What is it?' 1)" "$(run 'Compare them.' 2)" <<'PY'
import json, sys
out, a, b, c = sys.argv[1:]
cases = [
    {"prompt": "Describe.", "images": 1, "text": a},
    {"prompt": "Look: <__media__> What is it?", "images": 1, "text": b},
    {"prompt": "Compare them.", "images": 2, "text": c},
]
doc = {
    "about": "llama-mtmd-cli -m TEXT --mmproj MMPROJ --image picture.png ... -p PROMPT -n 12 --temp 0 "
             "-t 2 -fa off --chat-template vicuna; TEXT, MMPROJ: tools/synth-model.py llava f16 and "
             "--mmproj llava q8_0 (SHA-256 in index.json); picture.png: the 84x84 test picture; "
             "text: stdout without its leading and trailing newlines (tools/vision-cli-reference.sh)",
    "cases": cases,
}
open(out, "w").write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
PY
echo "wrote $here/tests/data/vision/cli.json"
