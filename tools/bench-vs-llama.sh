#!/usr/bin/env bash
# Speed against llama.cpp, by the protocol of ../shared/bench/README.md: same GGUF, same thread
# count, ours and llama-bench alternating in one run, medians of avg_ts, ratio ours / llama.cpp.
# Prints one markdown row per model (pp512 and tg128 columns as in README's Speed table).
#
#   tools/bench-vs-llama.sh [-r ROUNDS] [-t THREADS] [-d DEPTH] MODEL.gguf...
#
# -d DEPTH runs both tests on top of DEPTH tokens already in the cache (llama-bench's -d).
# LLAMAFILE (default target/release/llamafile) and LLAMA_BENCH (default
# ~/.cache/llama-cpp-ref/bin/llama-bench, built by ../shared/bench/build-llama-cpp.sh) name the
# two programs.
set -euo pipefail
rounds=3
threads=2
depth=0
while getopts "r:t:d:" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    t) threads=$OPTARG ;;
    d) depth=$OPTARG ;;
    *) echo "usage: $0 [-r ROUNDS] [-t THREADS] [-d DEPTH] MODEL.gguf..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-r ROUNDS] [-t THREADS] [-d DEPTH] MODEL.gguf..." >&2; exit 2; }
ours=${LLAMAFILE:-target/release/llamafile}
theirs=${LLAMA_BENCH:-$HOME/.cache/llama-cpp-ref/bin/llama-bench}
[ -x "$ours" ] || { echo "bench: $ours not built (cargo build --release)" >&2; exit 2; }
[ -x "$theirs" ] || { echo "bench: $theirs missing (../shared/bench/build-llama-cpp.sh)" >&2; exit 2; }
export LD_LIBRARY_PATH="$(dirname "$theirs")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "| model | pp512 ours | pp512 llama.cpp | ratio | tg128 ours | tg128 llama.cpp | ratio |"
echo "|---|---|---|---|---|---|---|"
for model in "$@"; do
  for r in $(seq "$rounds"); do
    "$ours" --bench -m "$model" -p 512 -n 128 -d "$depth" -t "$threads" -r 3 -o json >"$out/ours.$r.json"
    "$theirs" -m "$model" -p 512 -n 128 -d "$depth" -t "$threads" -r 3 -o json >"$out/theirs.$r.json" 2>/dev/null
  done
  python3 - "$model" "$out" "$rounds" "$depth" <<'EOF'
import json, os, statistics, sys
model, out, rounds, depth = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def medians(side):
    got = {"pp": [], "tg": []}
    for r in range(1, rounds + 1):
        for row in json.load(open(f"{out}/{side}.{r}.json")):
            key = "pp" if row["n_gen"] == 0 else "tg"
            got[key].append(row["avg_ts"])
    return {k: statistics.median(v) for k, v in got.items()}
o, t = medians("ours"), medians("theirs")
name = os.path.basename(model) + (f" @ d{depth}" if depth else "")
print(f"| {name} | {o['pp']:.1f} | {t['pp']:.1f} | {o['pp'] / t['pp']:.2f} "
      f"| {o['tg']:.1f} | {t['tg']:.1f} | {o['tg'] / t['tg']:.2f} |")
EOF
done
