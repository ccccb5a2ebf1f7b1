#!/usr/bin/env bash
# Draft-model-free speculation, type by type, against plain decoding and against llama.cpp's
# same type: greedy, N tokens per run, on each task prompt (tests/data/code-rewrite-qwen.txt:
# a code edit repeating most of its input; tests/data/spec/summary-qwen.txt: a summary quoting
# its source; tests/data/spec/json-extract-qwen.txt: JSON extraction). Runs alternate engine
# and type within each round; prints one line per run, then the median t/s per task, engine
# and type, and each type's ratio to the same engine's plain run.
#
#   tools/spec-types-bench.sh [-r ROUNDS] [-n TOKENS] [-t THREADS] MODEL.gguf [TASK.txt...]
#
# llama.cpp: llama-speculative-simple --spec-type TYPE (plain: llama-completion), from
# LLAMA_CPP_BIN (default ~/.cache/llama-cpp-ref/bin). Both get the same n-gram settings
# (TYPE_FLAGS below; smaller than the defaults, so that short answers draft).
set -euo pipefail
rounds=1
tokens=64
threads=2
while getopts "r:n:t:" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    n) tokens=$OPTARG ;;
    t) threads=$OPTARG ;;
    *) echo "usage: $0 [-r ROUNDS] [-n TOKENS] [-t THREADS] MODEL.gguf [TASK.txt...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-r ROUNDS] [-n TOKENS] [-t THREADS] MODEL.gguf [TASK.txt...]" >&2; exit 2; }
model=$1
shift
tasks=("$@")
[ ${#tasks[@]} -gt 0 ] || tasks=(tests/data/code-rewrite-qwen.txt tests/data/spec/summary-qwen.txt tests/data/spec/json-extract-qwen.txt)
bin=${LLAMAFILE:-target/release/llamafile}
cpp=${LLAMA_CPP_BIN:-$HOME/.cache/llama-cpp-ref/bin}
[ -x "$bin" ] || { echo "spec-types-bench: $bin not built (cargo build --release)" >&2; exit 2; }
types=(plain ngram-map-k ngram-map-k4v ngram-mod ngram-cache)
type_flags() {
  case $1 in
    plain) ;;
    ngram-map-k) echo "--spec-type ngram-map-k --spec-ngram-map-k-size-n 4 --spec-ngram-map-k-size-m 16" ;;
    ngram-map-k4v) echo "--spec-type ngram-map-k4v --spec-ngram-map-k4v-size-n 4 --spec-ngram-map-k4v-size-m 16" ;;
    ngram-mod) echo "--spec-type ngram-mod --spec-ngram-mod-n-match 8 --spec-ngram-mod-n-min 2 --spec-ngram-mod-n-max 32" ;;
    ngram-cache) echo "--spec-type ngram-cache" ;;
  esac
}
ours() { # TASK TYPE: generation t/s
  # shellcheck disable=SC2046
  "$bin" -m "$model" -f "$1" -n "$tokens" --temp 0 -t "$threads" -v $(type_flags "$2") 2>&1 >/dev/null \
    | sed -n 's/.*generation [0-9]* tokens in [0-9.]* ms (\([0-9.]*\) t\/s).*/\1/p'
}
theirs() { # TASK TYPE: decode t/s
  if [ "$2" = plain ]; then
    LD_LIBRARY_PATH=$cpp "$cpp/llama-completion" -m "$model" -f "$1" -n "$tokens" --temp 0 -t "$threads" \
      -no-cnv --perf 2>&1 </dev/null | grep ' eval time' | grep -v prompt \
      | sed 's/.*, *\([0-9.]*\) tokens per second.*/\1/' | tail -1
  else
    # shellcheck disable=SC2046
    LD_LIBRARY_PATH=$cpp "$cpp/llama-speculative-simple" -m "$model" -f "$1" -n "$tokens" --temp 0 \
      -t "$threads" $(type_flags "$2") 2>&1 </dev/null | sed -n 's/.*decoded .* speed: *\([0-9.]*\) t\/s.*/\1/p'
  fi
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
  for task in "${tasks[@]}"; do
    for ty in "${types[@]}"; do
      a=$(ours "$task" "$ty"); b=$(theirs "$task" "$ty")
      echo "$r $(basename "$task" .txt) $ty llamafile ${a:-?} llama.cpp ${b:-?}" | tee -a "$out"
    done
  done
done
echo
median() { sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR + 1) / 2)]; else print "?"}'; }
printf '%-20s %-14s %10s %7s %10s %7s\n' task type llamafile x-plain llama.cpp x-plain
for task in "${tasks[@]}"; do
  t=$(basename "$task" .txt)
  p1=$(awk -v t="$t" '$2 == t && $3 == "plain" {print $5}' "$out" | median)
  p2=$(awk -v t="$t" '$2 == t && $3 == "plain" {print $7}' "$out" | median)
  for ty in "${types[@]}"; do
    a=$(awk -v t="$t" -v y="$ty" '$2 == t && $3 == y {print $5}' "$out" | median)
    b=$(awk -v t="$t" -v y="$ty" '$2 == t && $3 == y {print $7}' "$out" | median)
    awk -v t="$t" -v y="$ty" -v a="$a" -v b="$b" -v p1="$p1" -v p2="$p2" 'BEGIN {
      printf "%-20s %-14s %10s %7.2f %10s %7.2f\n", t, y, a, (p1 > 0 ? a / p1 : 0), b, (p2 > 0 ? b / p2 : 0) }'
  done
done
