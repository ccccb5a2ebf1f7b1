#!/usr/bin/env bash
# Cross-builds the library's unit tests for aarch64 Linux and runs them under qemu-user, so the
# NEON kernels (src/quant/aarch64/) are checked against the scalar ones on an x86 machine.
# Installs nothing; says what is missing. `.cargo/config.toml` names the linker and runner.
#
#   packaging/test-aarch64.sh             # the quant:: tests
#   packaging/test-aarch64.sh ops::       # another test filter
#
# Runs the tests twice: on qemu's default CPU (with FEAT_DotProd, so the `neon` and `dotprod`
# tables are both compared with the scalar one) and on a Cortex-A72 (no DotProd: only `neon`).
# Set CARGO_TARGET_DIR to build elsewhere than target/aarch64-cross.
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu
missing=()
[ -d "$(rustc --print sysroot)/lib/rustlib/$target" ] \
  || missing+=("Rust's $target standard library (rustup target add $target)")
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 \
  || missing+=("the linker aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu)")
[ -e "$sysroot/lib/libc.so.6" ] \
  || missing+=("the aarch64 glibc in $sysroot (apt-get install libc6-dev-arm64-cross)")
command -v qemu-aarch64 >/dev/null 2>&1 \
  || missing+=("qemu-aarch64 (apt-get install qemu-user)")
if [ ${#missing[@]} -gt 0 ]; then
  echo "test-aarch64: missing:" >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 2
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/aarch64-cross}"
filter=("${@:-quant::}")
cargo test --release --target "$target" --lib -- "${filter[@]}"
echo "test-aarch64: again on a CPU without DotProd (QEMU_CPU=cortex-a72)"
QEMU_CPU=cortex-a72 cargo test --release --target "$target" --lib -- "${filter[@]}"
