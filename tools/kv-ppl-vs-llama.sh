#!/usr/bin/env bash
# Perplexity with each KV cache type (-ctk T -ctv T), ours against llama.cpp's native build
# and its AVX2-only build (LLAMA_CPP_VARIANT=avx2 ../shared/bench/build-llama-cpp.sh), as
# one markdown table. The two llama.cpp builds run other float orders (AVX-512 vs AVX2 dot
# products), which shows llama.cpp's own spread on a model.
#
#   tools/kv-ppl-vs-llama.sh [-f TEXT] [-c CTX] [-t THREADS] MODEL [TYPE...]
#
# Defaults: ../shared/reference/ppl-text.txt, -c 256 (batch = context), 2 threads, every
# type. LLAMAFILE, LLAMA_PERPLEXITY and LLAMA_PERPLEXITY_AVX2 override the binaries.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
text="$here/../shared/reference/ppl-text.txt"
ctx=256
threads=2
while getopts "f:c:t:" o; do
    case $o in
    f) text=$OPTARG ;;
    c) ctx=$OPTARG ;;
    t) threads=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
model=${1:?usage: $0 [-f TEXT] [-c CTX] [-t THREADS] MODEL [TYPE...]}
shift
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(f16 bf16 q8_0 q5_1 q5_0 q4_1 q4_0 iq4_nl)
ours=${LLAMAFILE:-$here/target/release/llamafile}
native=${LLAMA_PERPLEXITY:-$HOME/.cache/llama-cpp-ref/bin/llama-perplexity}
avx2=${LLAMA_PERPLEXITY_AVX2:-$HOME/.cache/llama-cpp-ref-avx2/bin/llama-perplexity}
for bin in "$ours" "$native" "$avx2"; do
    [ -x "$bin" ] || { echo "missing: $bin" >&2; exit 1; }
done

final() { grep -o 'Final estimate: PPL = [0-9.]*' | awk '{print $5}'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.2f%%", (a / b - 1) * 100 }'; }

common=(-m "$model" -f "$text" -c "$ctx" -b "$ctx" -t "$threads")
echo "| type | ours | llama.cpp native | llama.cpp AVX2 | ours vs native | ours vs AVX2 | AVX2 vs native |"
echo "|---|---|---|---|---|---|---|"
for ty in "${types[@]}"; do
    kv=(-ctk "$ty" -ctv "$ty")
    o=$("$ours" "${common[@]}" --perplexity "${kv[@]}" 2>&1 | final)
    n=$("$native" "${common[@]}" "${kv[@]}" -fa on 2>&1 | final)
    a=$("$avx2" "${common[@]}" "${kv[@]}" -fa on 2>&1 | final)
    echo "| $ty | $o | $n | $a | $(pct "$o" "$n") | $(pct "$o" "$a") | $(pct "$a" "$n") |"
done
