#!/usr/bin/env bash
# Speculative decoding against plain decoding on the same prompt, alternating runs in one go:
# greedy, N tokens each, prints generation t/s of both and the ratio (medians over rounds).
# The default prompt (tests/data/code-rewrite-qwen.txt, 484 tokens in Qwen's chat format)
# asks for a ~500-token Python module back with one class renamed, the case n-gram drafts
# are made for.
#
#   tools/spec-vs-plain.sh [-r ROUNDS] [-n TOKENS] [-f PROMPT] MODEL.gguf [SPEC FLAGS...]
#
# SPEC FLAGS default to `--spec-type ngram-simple`. LLAMAFILE names the binary (default
# target/release/llamafile); LLAMAFILE_CPU picks the kernel variant as usual.
set -euo pipefail
rounds=3
tokens=256
prompt=tests/data/code-rewrite-qwen.txt
while getopts "r:n:f:" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    n) tokens=$OPTARG ;;
    f) prompt=$OPTARG ;;
    *) echo "usage: $0 [-r ROUNDS] [-n TOKENS] [-f PROMPT] MODEL.gguf [SPEC FLAGS...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-r ROUNDS] [-n TOKENS] [-f PROMPT] MODEL.gguf [SPEC FLAGS...]" >&2; exit 2; }
model=$1
shift
spec=("$@")
[ ${#spec[@]} -gt 0 ] || spec=(--spec-type ngram-simple)
bin=${LLAMAFILE:-target/release/llamafile}
[ -x "$bin" ] || { echo "spec-vs-plain: $bin not built (cargo build --release)" >&2; exit 2; }

# Generation t/s from the --verbose timing line.
rate() {
  "$bin" -m "$model" -f "$prompt" -n "$tokens" --temp 0 -v "$@" 2>&1 >/dev/null \
    | sed -n 's/.*generation [0-9]* tokens in [0-9.]* ms (\([0-9.]*\) t\/s).*/\1/p'
}
plain=()
spec_rates=()
for _ in $(seq "$rounds"); do
  plain+=("$(rate)")
  spec_rates+=("$(rate "${spec[@]}")")
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }
p=$(median "${plain[@]}")
s=$(median "${spec_rates[@]}")
echo "plain ${plain[*]} t/s; speculative (${spec[*]}) ${spec_rates[*]} t/s"
awk -v p="$p" -v s="$s" 'BEGIN { printf "median: plain %.1f t/s, speculative %.1f t/s, ratio %.2f\n", p, s, s / p }'
