#!/usr/bin/env bash
# Generation at the memory wall, ours against llama.cpp: `tgN` (no prompt test) at each depth,
# ours (`--bench`) and llama-bench alternating ROUNDS times, medians of avg_ts, the ratio, and
# both engines' achieved weight bandwidth (weight bytes read per token, as our --bench counts
# them, × tokens/s) against this machine's read bound, which our --bench measures in each round
# (LLAMAFILE_BENCH_MEMBW=1: 512 MiB read on the same threads, best of five passes).
#
#   tools/tg-vs-llama.sh [-r ROUNDS] [-t THREADS] [-n TOKENS] [-d DEPTHS] MODEL.gguf
#
# DEPTHS is comma-separated (default 0,1024). LLAMAFILE (default target/release/llamafile) and
# LLAMA_BENCH (default ~/.cache/llama-cpp-ref/bin/llama-bench) name the programs; for the AVX2
# comparison set LLAMAFILE_CPU=avx2 and LLAMA_BENCH=~/.cache/llama-cpp-ref-avx2/bin/llama-bench.
set -euo pipefail
rounds=3
threads=2
ntok=128
depths=0,1024
usage="usage: $0 [-r ROUNDS] [-t THREADS] [-n TOKENS] [-d DEPTHS] MODEL.gguf"
while getopts "r:t:n:d:" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    t) threads=$OPTARG ;;
    n) ntok=$OPTARG ;;
    d) depths=$OPTARG ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { echo "$usage" >&2; exit 2; }
model=$1
ours=${LLAMAFILE:-target/release/llamafile}
theirs=${LLAMA_BENCH:-$HOME/.cache/llama-cpp-ref/bin/llama-bench}
[ -x "$ours" ] || { echo "tg-vs-llama: $ours not built (cargo build --release)" >&2; exit 2; }
[ -x "$theirs" ] || { echo "tg-vs-llama: $theirs missing (../shared/bench/build-llama-cpp.sh)" >&2; exit 2; }
export LD_LIBRARY_PATH="$(dirname "$theirs")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "$(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) \
ours=${LLAMAFILE_CPU:-default} llama-bench=$theirs load=$(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq "$rounds"); do
  for d in ${depths//,/ }; do
    LLAMAFILE_BENCH_MEMBW=1 "$ours" --bench -m "$model" -p 0 -n "$ntok" -d "$d" -t "$threads" \
      -r 1 -o json >"$out/ours.$r.$d.json" 2>"$out/ours.$r.$d.err"
    "$theirs" -m "$model" -p 0 -n "$ntok" -d "$d" -t "$threads" -r 1 -o json \
      >"$out/theirs.$r.$d.json" 2>/dev/null
  done
done
python3 - "$out" "$rounds" "$depths" "$(basename "$model")" <<'EOF'
import json, re, statistics, sys
out, rounds, depths, name = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4]
def ts(side, r, d):
    return json.load(open(f"{out}/{side}.{r}.{d}.json"))[0]["avg_ts"]
print("| model | test | ours t/s (runs) | llama.cpp t/s (runs) | ratio | ours GB/s | llama.cpp GB/s | read bound GB/s |")
print("|---|---|---|---|---|---|---|---|")
for d in depths:
    o = [ts("ours", r, d) for r in range(1, rounds + 1)]
    t = [ts("theirs", r, d) for r in range(1, rounds + 1)]
    gb, bound = None, []
    for r in range(1, rounds + 1):
        err = open(f"{out}/ours.{r}.{d}.err").read()
        m = re.search(r"([0-9.]+) GB of weights per token", err)
        gb = float(m.group(1)) if m else gb
        m = re.search(r"read bound ([0-9.]+) GB/s", err)
        if m:
            bound.append(float(m.group(1)))
    om, tm = statistics.median(o), statistics.median(t)
    runs = lambda v: ", ".join(f"{x:.1f}" for x in v)
    test = "tg" + ("" if d == "0" else f" @ d{d}")
    bw = lambda v: f"{v * gb:.1f}" if gb else "?"
    bnd = f"{statistics.median(bound):.1f}" if bound else "?"
    print(f"| {name} | {test} | {om:.2f} ({runs(o)}) | {tm:.2f} ({runs(t)}) | {om / tm:.2f} "
          f"| {bw(om)} | {bw(tm)} | {bnd} |")
EOF
