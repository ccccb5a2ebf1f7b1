#!/usr/bin/env bash
# Turns a GGUF model into a llamafile: one executable that carries the weights and runs them.
#
# usage: packaging/make-llamafile.sh MODEL.gguf OUT.llamafile [EXTRA_ARGS...]
#
# Builds the release binaries (cargo build --release), copies `llamafile` to OUT, writes an
# `.args` with `-m NAME.gguf`, each EXTRA_ARG on its own line (quoted where needed) and the
# `...` placeholder for the user's own arguments, then packs the GGUF (its data page-aligned,
# so it is mmap'd straight out of the executable) and the `.args` with zipalign.
#
# Environment:
#   LLAMAFILE_BIN, ZIPALIGN_BIN  prebuilt binaries to use instead of building them
#   ZIPALIGN_ALIGN               alignment of the GGUF's data (default 65536)
#
# The result is assembled in OUT.tmp and renamed to OUT only when complete, so a failed run
# never leaves a half-written llamafile behind.
set -euo pipefail

die() { echo "make-llamafile: $*" >&2; exit 1; }

[ $# -ge 2 ] || die "usage: $0 MODEL.gguf OUT.llamafile [EXTRA_ARGS...]"
model=$1
out=$2
shift 2

[ -f "$model" ] || die "$model: no such file"
[ -r "$model" ] || die "$model: not readable"
[ "$(head -c 4 "$model")" = "GGUF" ] || die "$model: not a GGUF file (no GGUF magic)"
name=$(basename "$model")
case "$name" in
  *.gguf | *.GGUF) ;;
  *) die "$model: the model's file name must end in .gguf" ;;
esac
out_dir=$(dirname "$out")
[ -d "$out_dir" ] || die "$out_dir: no such directory"

root=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${LLAMAFILE_BIN:-}" ] && [ -n "${ZIPALIGN_BIN:-}" ]; then
  llamafile_bin=$LLAMAFILE_BIN
  zipalign_bin=$ZIPALIGN_BIN
else
  command -v cargo >/dev/null 2>&1 || die "cargo not found (or set LLAMAFILE_BIN and ZIPALIGN_BIN)"
  (cd "$root" && cargo build --release --bin llamafile --bin zipalign) >&2 \
    || die "cargo build --release failed"
  target_dir=${CARGO_TARGET_DIR:-$root/target}
  llamafile_bin=${LLAMAFILE_BIN:-$target_dir/release/llamafile}
  zipalign_bin=${ZIPALIGN_BIN:-$target_dir/release/zipalign}
fi
[ -x "$llamafile_bin" ] || die "$llamafile_bin: no such executable"
[ -x "$zipalign_bin" ] || die "$zipalign_bin: no such executable"

# One argument per line; anything the .args reader would split or interpret is single-quoted
# (a single quote inside becomes '"'"', which the reader joins back into one argument).
quote_arg() {
  local a=$1
  if [ -n "$a" ] && [[ "$a" =~ ^[A-Za-z0-9_./:=+,@%-]+$ ]] && [ "$a" != "..." ]; then
    printf '%s\n' "$a"
  else
    printf "'%s'\n" "${a//\'/\'\"\'\"\'}"
  fi
}

tmp="$out.tmp"
work=$(mktemp -d)
trap 'rm -rf "$work" "$tmp"' EXIT

{
  echo "# default arguments of $(basename "$out"); the user's own go where ... is"
  echo "-m"
  quote_arg "$name"
  for a in "$@"; do quote_arg "$a"; done
  echo "..."
} >"$work/.args"

cp "$llamafile_bin" "$tmp" || die "cannot copy $llamafile_bin to $tmp"
chmod 755 "$tmp"
"$zipalign_bin" -j -a "${ZIPALIGN_ALIGN:-65536}" "$tmp" "$model" "$work/.args" \
  || die "zipalign failed"
mv -f "$tmp" "$out" || die "cannot rename $tmp to $out"
trap 'rm -rf "$work"' EXIT
echo "make-llamafile: wrote $out ($(stat -c %s "$out") bytes)" >&2
