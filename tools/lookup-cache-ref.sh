#!/usr/bin/env bash
# Regenerates tests/data/spec/lookup-smollm2.bin: the dynamic n-gram cache llama.cpp's
# `llama-lookup` writes (-lcd) after a greedy generation with SmolLM2, in the on-disk format
# of common/ngram-cache.cpp. tests/spec_ngram.rs checks that it loads, that its counts are
# consistent, and that lookup decoding with it as -lcs or -lcd keeps the output unchanged.
#
#   tools/lookup-cache-ref.sh [LLAMA_CPP_BIN_DIR]   (default ~/.cache/llama-cpp-ref/bin)
set -euo pipefail
bin=${1:-$HOME/.cache/llama-cpp-ref/bin}
model=${LLAMAFILE_MODELS:-$HOME/.cache/llamafile-rs/models}/SmolLM2-135M-Instruct.Q4_1.gguf
out=tests/data/spec/lookup-smollm2.bin
[ -x "$bin/llama-lookup" ] || { echo "lookup-cache-ref: no $bin/llama-lookup" >&2; exit 2; }
prompt=$'<|im_start|>user\nRepeat this code exactly:\ndef total(items):\n    s = 0\n    for item in items:\n        s += item.price * item.count\n    return s\n<|im_end|>\n<|im_start|>assistant\n'
rm -f "$out"
LD_LIBRARY_PATH=$bin "$bin/llama-lookup" -m "$model" -p "$prompt" -n 48 --temp 0 -t 2 -lcd "$out" >/dev/null 2>&1
ls -l "$out"
