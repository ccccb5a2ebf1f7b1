#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ (cargo-fuzz, libFuzzer) for SECONDS each, two at a time, from
# corpora seeded with the project's own test data. Prints, per target, the inputs run and the
# crashes found; exits non-zero when any target crashed, hung or ran out of memory (the input
# that did it is kept in fuzz/artifacts/TARGET/ and becomes a regression test).
#
# usage: tools/fuzz.sh SECONDS [TARGET...]
#
# Needs the nightly toolchain and cargo-fuzz (installed here when missing: rustup and crates.io),
# python3 with the `gguf` package for the GGUF seeds, and the test models (fetched when missing)
# for the tokenizer targets.
#
# FUZZ_SANITIZER=none builds the targets without AddressSanitizer (cargo fuzz's `-s none`) for
# long runs by hand, 3 to 8 times faster (2026-11-25: tokenize_bpe 3x, chat_template 6x,
# tokenize_spm 8x). The parsers and tokenizers are safe Rust, so panics, hangs and memory
# blow-ups are found the same way; json_request also runs the model's SIMD kernels (unsafe),
# whose out-of-bounds reads only ASan would catch: a run of it without ASan counts for panics,
# hangs, 5xx answers and files outside the slot sandbox, not for memory safety. CI keeps ASan.
set -euo pipefail

die() { echo "fuzz: $*" >&2; exit 2; }

[ $# -ge 1 ] || die "usage: $0 SECONDS [TARGET...]"
seconds=$1
shift
[[ "$seconds" =~ ^[0-9]+$ ]] && [ "$seconds" -gt 0 ] || die "SECONDS must be a positive number, got '$seconds'"

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
all_targets=(gguf zip args tokenize_bpe tokenize_spm gbnf json_schema chat_template http_request json_request image mmproj lookup_cache)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || die "unknown target '$t' (targets: ${all_targets[*]})"
done

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal >&2 \
  || die "could not install the nightly toolchain"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked >&2 \
  || die "could not install cargo-fuzz"
packaging/fetch-models.sh smollm2 gemma3 >&2 || die "could not fetch the tokenizer targets' models"

sanitizer=${FUZZ_SANITIZER:-address}
case $sanitizer in address | none) ;; *) die "FUZZ_SANITIZER is address or none, got '$sanitizer'" ;; esac
(cd fuzz && cargo +nightly fuzz build -O -s "$sanitizer" >&2) || die "the fuzz targets do not build"
bin_dir=fuzz/target/x86_64-unknown-linux-gnu/release

# Seeds: small valid inputs of each kind, so the fuzzer starts from the interesting shapes.
seeds=$(mktemp -d)
# (the zip target writes each input to /dev/shm/llamafile-fuzz-zip-PID)
trap 'rm -rf "$seeds"; rm -f /dev/shm/llamafile-fuzz-zip-*' EXIT
seed() { # TARGET NAME: stdin becomes a seed of TARGET
  mkdir -p "$seeds/$1"
  cat >"$seeds/$1/$2"
}
python3 - "$seeds" <<'EOF' || die "could not write the GGUF seeds (pip install gguf)"
import os, sys
import numpy as np
from gguf import GGUFWriter
out = os.path.join(sys.argv[1], "gguf")
os.makedirs(out, exist_ok=True)
w = GGUFWriter(os.path.join(out, "tiny.gguf"), "llama")
w.add_block_count(1)
w.add_context_length(32)
w.add_embedding_length(8)
w.add_head_count(2)
w.add_tokenizer_model("gpt2")
w.add_token_list(["a", "b", "ab", "<s>"])
w.add_token_merges(["a b"])
w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
w.add_tensor("token_embd.weight", np.arange(32, dtype=np.float32).reshape(4, 8))
w.add_tensor("output_norm.weight", np.ones(8, dtype=np.float16))
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
EOF
# image: tiny PNG (RGB, grey+alpha, 16-bit), BMP and GIF files, written with the standard
# library; mmproj: a tiny LLaVA projector (4x4 input, width 4) and a tiny Llama 4 one, f32.
python3 - "$seeds" <<'PYEOF' || die "could not write the image and mmproj seeds (pip install gguf)"
import os, struct, sys, zlib
import numpy as np
from gguf import GGUFWriter
root = sys.argv[1]
def put(target, name, data):
    os.makedirs(os.path.join(root, target), exist_ok=True)
    with open(os.path.join(root, target, name), "wb") as f:
        f.write(data)
def png(w, h, depth, color, raw_rows):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0)
    data = b"".join(b"\0" + r for r in raw_rows)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(data)) + chunk(b"IEND", b"")
put("image", "rgb.png", png(3, 2, 8, 2, [bytes(range(9)), bytes(range(100, 109))]))
put("image", "grey-alpha.png", png(2, 2, 8, 4, [b"\x10\xff\x20\x80", b"\x30\x00\x40\x7f"]))
put("image", "rgb16.png", png(1, 2, 16, 2, [bytes(range(6)), bytes(range(6, 12))]))
row = b"\x00\x00\xff\x00\xff\x00" + b"\x00\x00"  # two BGR pixels, padded to 4 bytes
pixels = row * 2
put("image", "tiny.bmp", b"BM" + struct.pack("<IHHI", 54 + len(pixels), 0, 0, 54)
    + struct.pack("<IiiHHIIiiII", 40, 2, 2, 1, 24, 0, len(pixels), 2835, 2835, 0, 0) + pixels)
put("image", "tiny.gif", bytes.fromhex(
    "474946383961020002008000" "00ff0000" "0000ff" "21f90401000000002c00000000020002000002028451003b"))
w = GGUFWriter(os.path.join(root, "tiny-mmproj.gguf"), "clip")
w.add_bool("clip.has_vision_encoder", True)
w.add_string("clip.projector_type", "mlp")
for k, v in [("image_size", 4), ("patch_size", 2), ("embedding_length", 4),
             ("feed_forward_length", 8), ("attention.head_count", 2), ("block_count", 2)]:
    w.add_uint32("clip.vision." + k, v)
w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
w.add_array("clip.vision.image_std", [0.25, 0.25, 0.25])
rng = np.random.default_rng(7)
def t(name, *shape):
    w.add_tensor(name, (rng.standard_normal(shape) * 0.5).astype(np.float32))
t("v.patch_embd.weight", 4, 3, 2, 2)
t("v.class_embd", 4)
t("v.position_embd.weight", 5, 4)
t("v.pre_ln.weight", 4)
t("v.pre_ln.bias", 4)
for il in range(2):
    for p in ("attn_q", "attn_k", "attn_v", "attn_out"):
        t(f"v.blk.{il}.{p}.weight", 4, 4)
        t(f"v.blk.{il}.{p}.bias", 4)
    for p in ("ln1", "ln2"):
        t(f"v.blk.{il}.{p}.weight", 4)
        t(f"v.blk.{il}.{p}.bias", 4)
    t(f"v.blk.{il}.ffn_up.weight", 8, 4)
    t(f"v.blk.{il}.ffn_down.weight", 4, 8)
t("mm.0.weight", 8, 4)
t("mm.0.bias", 8)
t("mm.2.weight", 8, 8)
t("mm.2.bias", 8)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
# A tiny Llama 4 projector (4x4 tiles of 2x2 patches, width 4, one head, shuffled by 2): the
# target's 5x3 image is cut into tiles, which reaches the tiling and the RoPE.
w = GGUFWriter(os.path.join(root, "tiny-llama4-mmproj.gguf"), "clip")
w.add_bool("clip.has_vision_encoder", True)
w.add_string("clip.projector_type", "llama4")
w.add_bool("clip.use_gelu", True)
for k, v in [("image_size", 4), ("patch_size", 2), ("embedding_length", 4),
             ("feed_forward_length", 8), ("attention.head_count", 1), ("block_count", 2),
             ("projector.scale_factor", 2)]:
    w.add_uint32("clip.vision." + k, v)
w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
t("v.patch_embd.weight", 4, 12)
t("v.class_embd", 4)
t("v.position_embd.weight", 5, 4)
for ln in ("v.pre_ln", "v.post_ln"):
    t(ln + ".weight", 4)
    t(ln + ".bias", 4)
for il in range(2):
    for p in ("attn_q", "attn_k", "attn_v", "attn_out"):
        t(f"v.blk.{il}.{p}.weight", 4, 4)
        t(f"v.blk.{il}.{p}.bias", 4)
    for p in ("ln1", "ln2"):
        t(f"v.blk.{il}.{p}.weight", 4)
        t(f"v.blk.{il}.{p}.bias", 4)
    t(f"v.blk.{il}.ffn_up.weight", 8, 4)
    t(f"v.blk.{il}.ffn_down.weight", 4, 8)
t("mm.model.mlp.1.weight", 8, 16)
t("mm.model.mlp.2.weight", 8, 8)
t("mm.model.fc.weight", 6, 8)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
# A tiny MiniCPM-V projector (4-pixel inputs of 2x2 patches, width 4, the 70x70 position table,
# a resampler of 2 queries in one head of 128): the target's 5x3 image is sliced, which reaches
# the slice plan, inputs of their own sizes and the resampler.
w = GGUFWriter(os.path.join(root, "tiny-minicpmv-mmproj.gguf"), "clip")
w.add_bool("clip.has_vision_encoder", True)
w.add_string("clip.projector_type", "resampler")
w.add_int32("clip.minicpmv_version", 3)
w.add_uint32("clip.minicpmv_query_num", 2)
w.add_bool("clip.use_gelu", True)
for k, v in [("image_size", 4), ("patch_size", 2), ("embedding_length", 4),
             ("feed_forward_length", 8), ("attention.head_count", 1), ("block_count", 1)]:
    w.add_uint32("clip.vision." + k, v)
w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
t("v.patch_embd.weight", 4, 3, 2, 2)
t("v.patch_embd.bias", 4)
w.add_tensor("v.position_embd.weight", (rng.standard_normal((4900, 4)) * 0.5).astype(np.float16))
t("v.post_ln.weight", 4)
t("v.post_ln.bias", 4)
for p in ("attn_q", "attn_k", "attn_v", "attn_out"):
    t(f"v.blk.0.{p}.weight", 4, 4)
    t(f"v.blk.0.{p}.bias", 4)
for p in ("ln1", "ln2"):
    t(f"v.blk.0.{p}.weight", 4)
    t(f"v.blk.0.{p}.bias", 4)
t("v.blk.0.ffn_up.weight", 8, 4)
t("v.blk.0.ffn_down.weight", 4, 8)
t("resampler.query", 2, 128)
t("resampler.kv.weight", 128, 4)
for ln in ("q", "kv", "post"):
    t(f"resampler.ln_{ln}.weight", 128)
    t(f"resampler.ln_{ln}.bias", 128)
for p in ("q", "k", "v", "out"):
    t(f"resampler.attn.{p}.weight", 128, 128)
    t(f"resampler.attn.{p}.bias", 128)
t("resampler.proj.weight", 128, 128)
t("resampler.pos_embed_k", 1, 128)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
PYEOF
seed mmproj tiny <"$seeds/tiny-mmproj.gguf"
seed mmproj tiny-llama4 <"$seeds/tiny-llama4-mmproj.gguf"
seed mmproj tiny-minicpmv <"$seeds/tiny-minicpmv-mmproj.gguf"
seed args example <.args.example
printf -- '-m\nmodel.gguf\n--temp 0.7\n"quoted arg"\n...\n' | seed args quoted
zipalign_bin=target/release/zipalign
[ -x "$zipalign_bin" ] || cargo build --release --bin zipalign >&2 || die "zipalign does not build"
# chat_template runs the templates that may never end in-process as the product does, in child
# processes of the llamafile binary (always rebuilt: the worker must speak this tree's protocol).
cargo build --release --bin llamafile >&2 || die "llamafile does not build"
export LLAMAFILE_FUZZ_TEMPLATE_WORKER="$root/target/release/llamafile"
mkdir -p "$seeds/pack" && cp .args.example "$seeds/pack/.args" && cp "$seeds/gguf/tiny.gguf" "$seeds/pack/"
printf 'an executable' >"$seeds/exe"
"$zipalign_bin" -a 64 -j "$seeds/exe" "$seeds/pack/.args" "$seeds/pack/tiny.gguf" >/dev/null 2>&1 \
  || die "zipalign could not pack the ZIP seed"
seed zip packed <"$seeds/exe"
head -c 1024 README.md | seed tokenize_bpe readme
printf 'Hello <|im_start|>user\nwörld 12345 \xf0\x9f\x98\x80  \t\n' | seed tokenize_bpe mixed
head -c 1024 README.md | seed tokenize_spm readme
printf '<bos><start_of_turn>user\nHi ▁there 12 </s>' | seed tokenize_spm special
seed lookup_cache llama-lookup <tests/data/spec/lookup-smollm2.bin
head -c 200 tests/data/spec/lookup-smollm2.bin | seed lookup_cache truncated
for g in tests/data/grammars/*.gbnf; do
  { cat "$g"; printf '\xff{"a": [1, 2]}'; } | seed gbnf "$(basename "$g")"
done
echo '{"type":"object","properties":{"a":{"type":"integer","minimum":3},"b":{"type":"array","items":{"type":"string","maxLength":4}}},"required":["a"]}' | seed json_schema object
echo '{"anyOf":[{"type":"number"},{"enum":["x",null,true]},{"type":"string","pattern":"^[a-z]{2,5}$"}]}' | seed json_schema anyof
echo '{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}' | seed json_schema ref
printf '{%% for m in messages %%}<|{{ m.role }}|>{{ m.content | trim }}{%% endfor %%}{%% if add_generation_prompt %%}<|assistant|>{%% endif %%}\xffbe helpful\xffhi {{ 7*7 }}\xffhello' \
  | seed chat_template simple
printf 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}GET /health HTTP/1.1\r\n\r\n' \
  | seed http_request pipelined
printf 'POST /completion HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n' \
  | seed http_request chunked
# json_request serves a tiny model with the first 4,096 tokens of SmolLM2's vocabulary: requests
# are what it fuzzes, not the weights or the vocabulary, and passes over a 49,152-token
# vocabulary (the output layer, the sampler) were most of each input's time when instrumented.
python3 tools/synth-model.py fuzz q8_0 "$seeds/server-model.gguf" >&2 \
  || die "could not write the json_request target's model (pip install gguf numpy)"
export LLAMAFILE_FUZZ_SERVER_MODEL="$seeds/server-model.gguf"
# json_request: the first byte picks the endpoint (its index in the target's ENDPOINTS list).
jr() { # INDEX NAME BODY
  { printf "\\x$(printf %02x "$1")"; printf '%s' "$3"; } | seed json_request "$2"
}
jr 0 completion '{"prompt": "Once upon a time", "n_predict": 4, "temperature": 0.7, "top_k": 20, "stop": ["\n"], "n_probs": 2, "cache_prompt": true}'
jr 0 completion-tokens '{"prompt": [1, 2, "and text", 3], "stream": true, "grammar": "root ::= [a-z]+", "logit_bias": [[15, -1.5]], "samplers": ["top_k", "temperature"]}'
jr 2 v1-completions '{"prompt": ["a", "b"], "max_tokens": 3, "logprobs": 2, "seed": 7, "echo": false}'
jr 3 chat '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "max_tokens": 2, "stream": true, "stream_options": {"include_usage": true}}'
jr 3 chat-schema '{"messages": [{"role": "user", "content": "JSON please"}], "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}, "logprobs": true, "top_logprobs": 3}'
jr 5 tokenize '{"content": "Hello <|im_start|> world", "add_special": true, "parse_special": false, "with_pieces": true}'
jr 6 detokenize '{"tokens": [1, 2, 3, 400]}'
jr 7 apply-template '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}'
jr 8 props '{"n_ctx": 4}'
jr 9 slot-save '{"filename": "slot0.bin"}'
jr 10 slot-restore '{"filename": "slot0.bin"}'
jr 11 slot-erase ''
# The slot actions save into $LLAMAFILE_FUZZ_SLOT_DIR/slots, and the target checks that nothing
# appears anywhere else in $LLAMAFILE_FUZZ_SLOT_DIR.
export LLAMAFILE_FUZZ_SLOT_DIR="$seeds/slot-sandbox"

# The longest input per target. A tokenizer's work grows with the input, and every branch of it
# is reached within 1 KB (the longest special or merged token is a few dozen bytes): longer
# inputs only slow it down (libFuzzer grows inputs towards this length over a run).
max_len() {
  case $1 in
    tokenize_bpe | tokenize_spm) echo 1024 ;;
    mmproj) echo 16384 ;; # the smallest projector takes ~6 KB
    *) echo 4096 ;;
  esac
}

run_target() { # TARGET: runs it, prints its summary line
  local t=$1 corpus=fuzz/corpus/$1 artifacts=fuzz/artifacts/$1 log=fuzz/artifacts/$1.log
  mkdir -p "$corpus" "$artifacts"
  [ -d "$seeds/$t" ] && cp -n "$seeds/$t"/* "$corpus"/ 2>/dev/null || true
  local status=0
  "$bin_dir/$t" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len="$(max_len "$t")" -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1 || status=$?
  local runs
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  local found
  found=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  printf '%-14s %12s inputs  %s crashes  (exit %s)\n' "$t" "$runs" "$found" "$status"
  [ "$status" -eq 0 ] && [ "$found" -eq 0 ]
}

jobs=$(nproc 2>/dev/null || echo 2)
failed=0
pids=()
names=()
for t in "${targets[@]}"; do
  run_target "$t" &
  pids+=($!)
  names+=("$t")
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || { failed=1; echo "fuzz: ${names[0]} failed; see fuzz/artifacts/${names[0]}.log" >&2; }
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
  fi
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { failed=1; echo "fuzz: ${names[$i]} failed; see fuzz/artifacts/${names[$i]}.log" >&2; }
done
exit "$failed"
