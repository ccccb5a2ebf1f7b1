#!/usr/bin/env bash
# Regenerates tests/data/families/: llama.cpp's teacher-forced logits for the synthetic models of
# tools/synth-model.py, and llama.cpp's own batched-vs-single-token noise on each, which is the
# tolerance tests/families.rs allows.
#
#   tools/make-family-refs.sh [FAMILY...]   # needs llama.cpp built as shared libraries and g++
#
# With FAMILY names, only their sets are regenerated; the other entries of index.json stay.
#
# LLAMA_CPP_DIR: a llama.cpp build from ../shared/bench/build-llama-cpp.sh (libllama.so in bin/,
# sources under src/); default ~/.cache/llama-cpp-ref-avx2. Models are generated into
# $LLAMAFILE_SYNTH (default ~/.cache/llamafile-rs/synth), as the tests do.
#
# For each family and weight type, three token sequences (1, 20 and 200 ids, seeded) are fed to
# llama.cpp twice: as one batch and one token per call. What is kept, per position of the batched
# run: the top 5 ids and logits, and the logits of 16 fixed vocabulary ids (format in
# tests/data/families/README.md); the noise is the mean |dlogit| between the two runs over those
# same ids, and their argmax agreement.
set -euo pipefail
cd "$(dirname "$0")/.."
llama="${LLAMA_CPP_DIR:-$HOME/.cache/llama-cpp-ref-avx2}"
src=$(ls -d "$llama"/src/*/vendor/llama.cpp 2>/dev/null | head -1)
[ -f "$llama/bin/libllama.so" ] && [ -n "$src" ] || { echo "no llama.cpp build at $llama" >&2; exit 1; }
synth="${LLAMAFILE_SYNTH:-$HOME/.cache/llamafile-rs/synth}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$synth" tests/data/families

g++ -O2 -std=c++17 -I"$src/include" -I"$src/ggml/include" tools/llama-ref-logits.cpp \
  -L"$llama/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$llama/bin" -o "$work/llama-ref-logits"

# family type n_ctx (phi3 twice: at or below its original context of 256 it uses the short
# RoPE factors, above it the long ones)
sets="llama3 f16 512
llama3 q8_0 512
mistral f16 512
mistral q8_0 512
qwen3 f16 512
qwen3 q8_0 512
gemma2 f16 512
gemma2 q8_0 512
phi3 f16 256
phi3 q8_0 256
phi3 f16 512
phi3 q8_0 512
mixtral f16 512
mixtral q8_0 512
qwen2moe f16 512
qwen2moe q8_0 512
qwen3moe f16 512
qwen3moe q8_0 512
deepseek2 f16 512
deepseek2 q8_0 512
deepseek3 f16 512
deepseek3 q8_0 512"
if [ $# -gt 0 ]; then
  sets=$(printf '%s\n' "$sets" | grep -E "^($(IFS='|'; echo "$*")) ")
fi

while read -r family type n_ctx; do
  model="$synth/$family-$type.gguf"
  [ -f "$model" ] || python3 tools/synth-model.py "$family" "$type" "$model"
  name="$family-$type-c$n_ctx"
  for n in 1 20 200; do
    python3 -c "import random; r = random.Random($n * 7919); print(*[r.randrange(49152) for _ in range($n)])" \
      > "$work/$name-$n.txt"
    for mode in batch single; do
      "$work/llama-ref-logits" "$model" "$n_ctx" "$mode" "$work/$name-$n.txt" "$work/$name-$n-$mode.f32"
    done
  done
  echo "$name $model" >> "$work/sets"
done <<< "$sets"

python3 - "$work" <<'PY'
import hashlib, json, sys
import numpy as np
work = sys.argv[1]
K, N_VOCAB = 5, 49152
sample = [int(i) for i in np.linspace(7, N_VOCAB - 1, 16).round()]
index = {"top_k": K, "sample_ids": sample, "n_vocab": N_VOCAB, "sets": []}
try:
    old = json.load(open("tests/data/families/index.json"))
except FileNotFoundError:
    old = {"sets": []}
redone = {line.split()[0] for line in open(f"{work}/sets")}
kept = [s for s in old["sets"] if s["name"] not in redone]
for line in open(f"{work}/sets"):
    name, model = line.split()
    family, wtype, ctx = name.rsplit("-", 2)
    entry = {"name": name, "family": family, "type": wtype, "n_ctx": int(ctx[1:]),
             "model_sha256": hashlib.sha256(open(model, "rb").read()).hexdigest(), "prompts": []}
    blob = bytearray()
    d_sum, d_n, agree, pos = 0.0, 0, 0, 0
    for n in (1, 20, 200):
        ids = [int(t) for t in open(f"{work}/{name}-{n}.txt").read().split()]
        a = np.fromfile(f"{work}/{name}-{n}-batch.f32", np.float32).reshape(n, N_VOCAB)
        b = np.fromfile(f"{work}/{name}-{n}-single.f32", np.float32).reshape(n, N_VOCAB)
        for r in range(n):
            top = np.argsort(-a[r], kind="stable")[:K]
            blob += top.astype("<u4").tobytes() + a[r, top].astype("<f4").tobytes()
            blob += a[r, sample].astype("<f4").tobytes()
            cols = np.concatenate([top, sample])
            d_sum += float(np.abs(a[r, cols].astype(np.float64) - b[r, cols]).sum())
            d_n += len(cols)
            agree += int(a[r].argmax() == b[r].argmax())
            pos += 1
        entry["prompts"].append(ids)
    entry["noise_mean_abs"] = d_sum / d_n
    entry["noise_argmax_agree"] = agree / pos
    open(f"tests/data/families/{name}.bin", "wb").write(bytes(blob))
    index["sets"].append(entry)
    print(f"{name}: llama.cpp batched vs single: mean |dlogit| {entry['noise_mean_abs']:.6f}, "
          f"argmax agreement {agree}/{pos}")
index["sets"] = kept + index["sets"]
with open("tests/data/families/index.json", "w") as f:  # one line per set
    f.write(json.dumps({k: v for k, v in index.items() if k != "sets"})[:-1] + ', "sets": [\n')
    f.write(",\n".join(json.dumps(s) for s in index["sets"]) + "\n]}\n")
PY
