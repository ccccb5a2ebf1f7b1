#!/usr/bin/env bash
# Time to first token from a cold process with a warm page cache, against llama.cpp: the whole
# command `-m MODEL -p PROMPT -n 1 -t THREADS` (start, map, tokenize, prefill, one token, exit),
# ours and llama-completion alternating, after one untimed run of each to warm the page cache.
# Prints the median wall time of each in milliseconds and the ratio ours / llama.cpp (below 1 is
# faster), plus our own breakdown from `--verbose`.
#
#   tools/ttft-vs-llama.sh [-r RUNS] [-t THREADS] MODEL.gguf [PROMPT]
#
# LLAMAFILE (default target/release/llamafile) and LLAMA_COMPLETION (default
# ~/.cache/llama-cpp-ref/bin/llama-completion) name the two programs.
set -euo pipefail
runs=10
threads=2
while getopts "r:t:" opt; do
  case $opt in
    r) runs=$OPTARG ;;
    t) threads=$OPTARG ;;
    *) echo "usage: $0 [-r RUNS] [-t THREADS] MODEL.gguf [PROMPT]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-r RUNS] [-t THREADS] MODEL.gguf [PROMPT]" >&2; exit 2; }
model=$1
prompt=${2:-"The capital of France is"}
ours=${LLAMAFILE:-target/release/llamafile}
theirs=${LLAMA_COMPLETION:-$HOME/.cache/llama-cpp-ref/bin/llama-completion}
[ -x "$ours" ] || { echo "ttft: $ours not built (cargo build --release)" >&2; exit 2; }
[ -x "$theirs" ] || { echo "ttft: $theirs missing (../shared/bench/build-llama-cpp.sh)" >&2; exit 2; }
export LD_LIBRARY_PATH="$(dirname "$theirs")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

run_ours() { "$ours" -m "$model" -p "$prompt" -n 1 -t "$threads" --temp 0 "$@" </dev/null; }
run_theirs() { "$theirs" -m "$model" -p "$prompt" -n 1 -t "$threads" --temp 0 -no-cnv </dev/null; }
wall_ms() {
  local t0 t1
  t0=$(date +%s%N)
  "$@" >/dev/null 2>&1
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000))
}

run_ours >/dev/null 2>&1
run_theirs >/dev/null 2>&1
o=() t=()
for _ in $(seq "$runs"); do
  o+=("$(wall_ms run_ours)")
  t+=("$(wall_ms run_theirs)")
done
python3 - "${o[*]}" "${t[*]}" "$(basename "$model")" <<'EOF'
import statistics, sys
o = statistics.median(int(x) for x in sys.argv[1].split())
t = statistics.median(int(x) for x in sys.argv[2].split())
print(f"{sys.argv[3]}: first token after {o:.0f} ms (ours) vs {t:.0f} ms (llama.cpp), ratio {o / t:.2f}")
EOF
run_ours --verbose 2>&1 >/dev/null | grep 'first token at' || true
