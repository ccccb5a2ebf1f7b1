#!/usr/bin/env bash
# Generation over llama.cpp's RPC workers against llama.cpp's own RPC client, on the same split:
# starts two ggml-rpc-server workers on loopback (-t 1 each), then generates TOKENS greedy tokens
# of MODEL with the last NGL blocks shared between the two workers and the rest on the local CPU,
# ours (`llamafile --rpc A,B -ngl NGL --verbose`) and `llama-completion --rpc A,B -ngl NGL`
# alternating, RUNS times each. Prints each run, then the median generation tokens/s of each, the
# ratio ours / llama.cpp (above 1 is faster), and our bytes sent to and received from the workers
# per generated token (from `--verbose`; the weights' upload and the prompt are not counted).
#
#   tools/rpc-vs-llama.sh [-r RUNS] [-n TOKENS] [-t THREADS] MODEL.gguf NGL
#
# LLAMAFILE (default target/release/llamafile), LLAMA_COMPLETION and RPC_SERVER (default
# ~/.cache/llama-cpp-ref/bin/{llama-completion,ggml-rpc-server}) name the programs.
set -euo pipefail
runs=3
tokens=64
threads=1
while getopts "r:n:t:" opt; do
  case $opt in
    r) runs=$OPTARG ;;
    n) tokens=$OPTARG ;;
    t) threads=$OPTARG ;;
    *) echo "usage: $0 [-r RUNS] [-n TOKENS] [-t THREADS] MODEL.gguf NGL" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { echo "usage: $0 [-r RUNS] [-n TOKENS] [-t THREADS] MODEL.gguf NGL" >&2; exit 2; }
model=$1
ngl=$2
bin=$HOME/.cache/llama-cpp-ref/bin
ours=${LLAMAFILE:-target/release/llamafile}
theirs=${LLAMA_COMPLETION:-$bin/llama-completion}
worker=${RPC_SERVER:-$bin/ggml-rpc-server}
for p in "$ours" "$theirs" "$worker"; do
  [ -x "$p" ] || { echo "rpc-vs-llama: $p missing" >&2; exit 2; }
done
export LD_LIBRARY_PATH="$(dirname "$theirs")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
endpoints=()
for _ in 1 2; do
  port=$(free_port)
  "$worker" -H 127.0.0.1 -p "$port" -t 1 >/dev/null 2>&1 &
  pids+=($!)
  endpoints+=("127.0.0.1:$port")
done
rpc=$(IFS=,; echo "${endpoints[*]}")
for ep in "${endpoints[@]}"; do
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/${ep%:*}/${ep#*:}") 2>/dev/null && break
    sleep 0.1
  done
done

prompt="Once upon a time"
common=(-m "$model" -p "$prompt" -n "$tokens" -t "$threads" --temp 0 --ignore-eos --rpc "$rpc" -ngl "$ngl")
ours_tps=()
theirs_tps=()
sent=()
received=()
for i in $(seq "$runs"); do
  out=$("$ours" "${common[@]}" --verbose 2>&1 >/dev/null </dev/null)
  tps=$(sed -n 's/.*generation [0-9]* tokens in [0-9.]* ms (\([0-9.]*\) t\/s).*/\1/p' <<<"$out")
  traffic=$(sed -n 's/.*RPC traffic: \([0-9]*\) bytes sent, \([0-9]*\) received.*/\1 \2/p' <<<"$out")
  [ -n "$tps" ] && [ -n "$traffic" ] || { echo "rpc-vs-llama: no timings from llamafile:" >&2; echo "$out" >&2; exit 1; }
  ours_tps+=("$tps")
  sent+=("${traffic% *}")
  received+=("${traffic#* }")
  out=$("$theirs" "${common[@]}" -no-cnv 2>&1 >/dev/null </dev/null)
  ttps=$(sed -n 's/.*_print: *eval time.*, *\([0-9.]*\) tokens per second.*/\1/p' <<<"$out")
  [ -n "$ttps" ] || { echo "rpc-vs-llama: no timings from llama-completion:" >&2; echo "$out" >&2; exit 1; }
  theirs_tps+=("$ttps")
  echo "run $i: llamafile $tps t/s (${traffic% *} B sent, ${traffic#* } B received per token), llama.cpp $ttps t/s"
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
o=$(median "${ours_tps[@]}")
t=$(median "${theirs_tps[@]}")
echo "$(basename "$model") -ngl $ngl over 2 workers, $tokens tokens, -t $threads: llamafile $o t/s, llama.cpp $t t/s, ratio $(awk -v o="$o" -v t="$t" 'BEGIN {printf "%.2f", o / t}')"
echo "llamafile bytes per generated token: $(median "${sent[@]}") sent, $(median "${received[@]}") received"
