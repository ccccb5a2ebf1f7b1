#!/usr/bin/env bash
# Regenerates tests/data/lora/: llama.cpp's teacher-forced logits for the synthetic llama3 model
# of tools/synth-model.py with its synthetic LoRA adapters applied (`--lora all`, `--lora some`),
# and llama.cpp's own batched-vs-single-token noise on each, which is the tolerance
# tests/lora.rs allows.
#
#   tools/make-lora-refs.sh        # needs llama.cpp built as shared libraries and g++
#
# LLAMA_CPP_DIR: a llama.cpp build (libllama.so in bin/, sources under src/); default
# ~/.cache/llama-cpp-ref. The model and adapters are generated into $LLAMAFILE_SYNTH (default
# ~/.cache/llamafile-rs/synth), as the tests do.
#
# Sets: adapter `all` at scale 1 and at 0.5, and `all` at 1 with `some` at 0.5 (two at once).
# Each feeds the token sequences of 1, 20 and 200 ids of tools/make-family-refs.sh, as one batch
# and one token per call, through tools/llama-ref-logits.cpp; the files hold what
# tests/data/families/README.md describes (top 5 ids and logits, 16 fixed ids' logits).
set -euo pipefail
cd "$(dirname "$0")/.."
llama="${LLAMA_CPP_DIR:-$HOME/.cache/llama-cpp-ref}"
src=$(ls -d "$llama"/src/*/vendor/llama.cpp 2>/dev/null | head -1)
[ -f "$llama/bin/libllama.so" ] && [ -n "$src" ] || { echo "no llama.cpp build at $llama" >&2; exit 1; }
synth="${LLAMAFILE_SYNTH:-$HOME/.cache/llamafile-rs/synth}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$synth" tests/data/lora

g++ -O2 -std=c++17 -I"$src/include" -I"$src/ggml/include" tools/llama-ref-logits.cpp \
  -L"$llama/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$llama/bin" -o "$work/llama-ref-logits"

model="$synth/llama3-f16.gguf"
[ -f "$model" ] || python3 tools/synth-model.py llama3 f16 "$model"
for a in all some; do
  python3 tools/synth-model.py --lora "$a" llama3 f16 "$synth/lora-$a-llama3.gguf"
done

# name, then the adapters as NAME:SCALE
sets="all-1 all:1
all-0.5 all:0.5
all-1+some-0.5 all:1 some:0.5"
n_ctx=512
while read -r name adapters; do
  args=()
  for a in $adapters; do args+=("$synth/lora-${a%%:*}-llama3.gguf:${a#*:}"); done
  for n in 1 20 200; do
    python3 -c "import random; r = random.Random($n * 7919); print(*[r.randrange(49152) for _ in range($n)])" \
      > "$work/$name-$n.txt"
    for mode in batch single; do
      "$work/llama-ref-logits" "$model" "$n_ctx" "$mode" "$work/$name-$n.txt" \
        "$work/$name-$n-$mode.f32" "${args[@]}"
    done
  done
  echo "$name $adapters" >> "$work/sets"
done <<< "$sets"

python3 - "$work" "$model" "$synth" <<'PY'
import hashlib, json, sys
import numpy as np
work, model, synth = sys.argv[1:]
K, N_VOCAB = 5, 49152
sample = [int(i) for i in np.linspace(7, N_VOCAB - 1, 16).round()]
sha = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest()
index = {"top_k": K, "sample_ids": sample, "n_vocab": N_VOCAB, "n_ctx": 512,
         "model": "llama3-f16", "model_sha256": sha(model),
         "adapters": {a: sha(f"{synth}/lora-{a}-llama3.gguf") for a in ("all", "some")},
         "sets": []}
for line in open(f"{work}/sets"):
    name, *adapters = line.split()
    entry = {"name": name,
             "adapters": [[a.split(":")[0], float(a.split(":")[1])] for a in adapters],
             "prompts": []}
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
    open(f"tests/data/lora/{name}.bin", "wb").write(bytes(blob))
    index["sets"].append(entry)
    print(f"{name}: llama.cpp batched vs single: mean |dlogit| {entry['noise_mean_abs']:.6f}, "
          f"argmax agreement {agree}/{pos}")
with open("tests/data/lora/index.json", "w") as f:  # one line per set
    f.write(json.dumps({k: v for k, v in index.items() if k != "sets"})[:-1] + ', "sets": [\n')
    f.write(",\n".join(json.dumps(s) for s in index["sets"]) + "\n]}\n")
PY
