#!/usr/bin/env bash
# Cross-builds the aarch64 Linux engine, packs SmolLM2 into an aarch64 llamafile with
# make-llamafile.sh --target linux-aarch64, and runs it under qemu-aarch64 (user mode, with the
# cross glibc) beside the x86-64 llamafile: the same greedy tokens, with bit-identical logits,
# on a short prompt, once with LLAMAFILE_CPU=neon and once with =dotprod (qemu's default CPU,
# `max`, has FEAT_DotProd). Each run's `--verbose` line must name the variant asked for, so a
# silent fallback to another table cannot pass. Installs nothing; exit status 2 says what is
# missing. Set CARGO_TARGET_DIR to build elsewhere than target/ (aarch64: target/aarch64-cross).
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu
model="${LLAMAFILE_MODELS:-$HOME/.cache/llamafile-rs/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
missing=()
[ -d "$(rustc --print sysroot)/lib/rustlib/$target" ] \
  || missing+=("Rust's $target standard library (rustup target add $target)")
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 \
  || missing+=("the linker aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu)")
[ -e "$sysroot/lib/libc.so.6" ] \
  || missing+=("the aarch64 glibc in $sysroot (apt-get install libc6-dev-arm64-cross)")
command -v qemu-aarch64 >/dev/null 2>&1 || missing+=("qemu-aarch64 (apt-get install qemu-user)")
command -v python3 >/dev/null 2>&1 || missing+=("python3")
[ -f "$model" ] || missing+=("$model (packaging/fetch-models.sh smollm2)")
if [ ${#missing[@]} -gt 0 ]; then
  echo "test-aarch64-llamafile: missing:" >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 2
fi

host_dir=${CARGO_TARGET_DIR:-target}
cross_dir=${CARGO_TARGET_DIR:-target/aarch64-cross}
cargo build --release --bin llamafile --bin zipalign
CARGO_TARGET_DIR=$cross_dir cargo build --release --target "$target" --bin llamafile

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export LLAMAFILE_BIN="$host_dir/release/llamafile" ZIPALIGN_BIN="$host_dir/release/zipalign"
export LLAMAFILE_BIN_LINUX_AARCH64="$cross_dir/$target/release/llamafile"
packaging/make-llamafile.sh "$model" "$work/smollm2" --target linux-x86_64,linux-aarch64
arm="$work/smollm2-linux-aarch64.llamafile"

status=0
for cpu in neon dotprod; do
  run="env LLAMAFILE_CPU=$cpu qemu-aarch64 -L $sysroot $arm"
  chosen=$($run -p hi -n 1 --verbose 2>&1 >/dev/null | grep -o 'cpu kernels: [a-z0-9]*' || true)
  if [ "$chosen" != "cpu kernels: $cpu" ]; then
    echo "test-aarch64-llamafile: LLAMAFILE_CPU=$cpu ran '${chosen:-nothing said}'" >&2
    status=1
    continue
  fi
  python3 packaging/compare-llamafiles.py --label "aarch64 llamafile, $cpu" --exact --timeout 900 \
    --prompts short -n 16 --reference "$work/smollm2-linux-x86_64.llamafile" \
    --candidate "$run" || status=1
done
exit "$status"
