#!/usr/bin/env bash
# Turns a GGUF model into llamafiles: executables that carry the weights and run them.
#
# usage: packaging/make-llamafile.sh MODEL.gguf OUT [OPTIONS] [--] [EXTRA_ARGS...]
#
# Options (right after OUT; the first argument that is not one of them, or everything after
# `--`, starts the EXTRA_ARGS):
#   --target T[,T...]  what to build for (repeatable): linux-x86_64 (the default),
#                      linux-aarch64, windows-x86_64
#   --side-gguf        write the weights beside the executables instead of inside them (what
#                      windows-x86_64 does by itself when the .exe would pass 4 GiB)
#   --mmproj FILE      a multimodal projector (llama.cpp's mmproj GGUF) packed beside the model,
#                      and `--mmproj NAME` in `.args` after `-m`: the llamafile reads images
#                      (`--image` on the command line, image_url parts in the server and the
#                      chat page)
#
# Output names: with one target, OUT itself (for windows-x86_64, `.exe` is appended unless OUT
# ends in it). With several, STEM-TARGET.llamafile for Linux targets and STEM-TARGET.exe for
# Windows, where STEM is OUT without a trailing `.llamafile` or `.exe`.
#
# For each target: copies that target's `llamafile` binary to the output, writes an `.args`
# with `-m NAME.gguf` (and `--mmproj PROJ.gguf`), each EXTRA_ARG on its own line (quoted where needed) and the `...`
# placeholder for the user's own arguments, then packs the GGUF (its data page-aligned, so it
# is mmap'd straight out of the executable) and the `.args` with zipalign.
#
# Side files: Windows refuses to run an executable over 4 GiB. For such a model the `.exe`
# holds only `.args`, and the GGUF is written beside it as OUT_DIR/NAME.gguf (not copied when
# it is already there). The engine finds it by the `-m` rule (README, "Single-file
# llamafiles"): a relative name that is neither a file in the current directory nor an entry of
# the program's own ZIP is looked up in the directory holding the program. Keep the two files
# together.
#
# Reproducible: the same binaries, model and arguments give byte-identical outputs (zipalign
# stamps entries with a fixed time; nothing here depends on the clock, the output's name or
# the umask).
#
# Environment:
#   LLAMAFILE_BIN                 the linux-x86_64 engine to use instead of building it
#   LLAMAFILE_BIN_LINUX_AARCH64   the linux-aarch64 engine (else cargo build --target
#                                 aarch64-unknown-linux-gnu)
#   LLAMAFILE_BIN_WINDOWS_X86_64  the windows-x86_64 engine (else cargo build --target
#                                 x86_64-pc-windows-gnu)
#   ZIPALIGN_BIN                  zipalign for this machine (else built)
#   ZIPALIGN_ALIGN                alignment of the GGUF's data (default 65536)
#   LLAMAFILE_SIDE_GGUF=1         as --side-gguf
#
# Each output is assembled in OUT.tmp and renamed to OUT only when complete, so a failed run
# never leaves a half-written llamafile behind.
set -euo pipefail

die() { echo "make-llamafile: $*" >&2; exit 1; }
say() { echo "make-llamafile: $*" >&2; }

[ $# -ge 2 ] || die "usage: $0 MODEL.gguf OUT [--target T[,T...]] [--side-gguf] [--mmproj FILE] [--] [EXTRA_ARGS...]"
model=$1
out=$2
shift 2

targets=()
side=${LLAMAFILE_SIDE_GGUF:-0}
mmproj=
while [ $# -gt 0 ]; do
  case "$1" in
    --target)
      [ $# -ge 2 ] || die "--target needs a value (linux-x86_64, linux-aarch64, windows-x86_64)"
      IFS=, read -r -a more <<<"$2"
      targets+=("${more[@]}")
      shift 2
      ;;
    --target=*)
      IFS=, read -r -a more <<<"${1#--target=}"
      targets+=("${more[@]}")
      shift
      ;;
    --side-gguf) side=1; shift ;;
    --mmproj)
      [ $# -ge 2 ] || die "--mmproj needs a projector file (an mmproj GGUF)"
      mmproj=$2
      shift 2
      ;;
    --mmproj=*) mmproj=${1#--mmproj=}; shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(linux-x86_64)
declare -A seen=()
for t in "${targets[@]}"; do
  case "$t" in
    linux-x86_64 | linux-aarch64 | windows-x86_64) ;;
    *) die "--target $t: unknown target (linux-x86_64, linux-aarch64, windows-x86_64)" ;;
  esac
  [ -z "${seen[$t]:-}" ] || die "--target $t: given twice"
  seen[$t]=1
done

[ -f "$model" ] || die "$model: no such file"
[ -r "$model" ] || die "$model: not readable"
[ "$(head -c 4 "$model")" = "GGUF" ] || die "$model: not a GGUF file (no GGUF magic)"
name=$(basename "$model")
case "$name" in
  *.gguf | *.GGUF) ;;
  *) die "$model: the model's file name must end in .gguf" ;;
esac
mmproj_name=
if [ -n "$mmproj" ]; then
  [ -f "$mmproj" ] || die "--mmproj $mmproj: no such file"
  [ -r "$mmproj" ] || die "--mmproj $mmproj: not readable"
  [ "$(head -c 4 "$mmproj")" = "GGUF" ] || die "--mmproj $mmproj: not a GGUF file (no GGUF magic)"
  mmproj_name=$(basename "$mmproj")
  case "$mmproj_name" in
    *.gguf | *.GGUF) ;;
    *) die "--mmproj $mmproj: the projector's file name must end in .gguf" ;;
  esac
  [ "$mmproj_name" != "$name" ] || die "--mmproj $mmproj: the projector and the model have the same file name"
fi
out_dir=$(dirname "$out")
[ -d "$out_dir" ] || die "$out_dir: no such directory"

# The Rust target triple, the binary's name and the output name of each target.
triple_of() {
  case "$1" in
    linux-x86_64) echo x86_64-unknown-linux-gnu ;;
    linux-aarch64) echo aarch64-unknown-linux-gnu ;;
    windows-x86_64) echo x86_64-pc-windows-gnu ;;
  esac
}
output_of() {
  local t=$1
  if [ ${#targets[@]} -eq 1 ]; then
    case "$t:$out" in
      windows-*:*.exe | windows-*:*.EXE | linux-*:*) echo "$out" ;;
      windows-*:*) echo "$out.exe" ;;
    esac
    return
  fi
  local stem=${out%.llamafile}
  stem=${stem%.exe}
  case "$t" in
    windows-*) echo "$stem-$t.exe" ;;
    *) echo "$stem-$t.llamafile" ;;
  esac
}

root=$(cd "$(dirname "$0")/.." && pwd)
target_dir=${CARGO_TARGET_DIR:-$root/target}
build() {  # build [--target TRIPLE] --bin NAME...
  command -v cargo >/dev/null 2>&1 || die "cargo not found (or set the *_BIN variables above)"
  (cd "$root" && cargo build --release "$@") >&2 || die "cargo build --release $* failed"
}

declare -A engine=()
for t in "${targets[@]}"; do
  case "$t" in
    linux-x86_64) bin=${LLAMAFILE_BIN:-} ;;
    linux-aarch64) bin=${LLAMAFILE_BIN_LINUX_AARCH64:-} ;;
    windows-x86_64) bin=${LLAMAFILE_BIN_WINDOWS_X86_64:-} ;;
  esac
  if [ -z "$bin" ]; then
    if [ "$t" = linux-x86_64 ]; then
      build --bin llamafile
      bin=$target_dir/release/llamafile
    else
      triple=$(triple_of "$t")
      build --target "$triple" --bin llamafile
      bin=$target_dir/$triple/release/llamafile
      [ "$t" != windows-x86_64 ] || bin=$bin.exe
    fi
  fi
  [ -f "$bin" ] || die "$bin: no such file (the $t engine)"
  engine[$t]=$bin
done
if [ -z "${ZIPALIGN_BIN:-}" ]; then
  build --bin zipalign
  ZIPALIGN_BIN=$target_dir/release/zipalign
fi
[ -x "$ZIPALIGN_BIN" ] || die "$ZIPALIGN_BIN: no such executable"
align=${ZIPALIGN_ALIGN:-65536}

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

work=$(mktemp -d)
tmps=()
cleanup() { rm -rf "$work" "${tmps[@]}"; }
trap cleanup EXIT

{
  echo "# default arguments; the user's own go where ... is"
  echo "-m"
  quote_arg "$name"
  if [ -n "$mmproj_name" ]; then
    echo "--mmproj"
    quote_arg "$mmproj_name"
  fi
  for a in "$@"; do quote_arg "$a"; done
  echo "..."
} >"$work/.args"
chmod 644 "$work/.args"

# Windows runs no executable of 4 GiB or more. The packed size is at most the engine, the
# model, two alignments of padding and a few KiB of records.
model_size=$(stat -c %s "$model")
[ -z "$mmproj" ] || model_size=$((model_size + $(stat -c %s "$mmproj")))
too_big_for_windows() {
  local size=$(($(stat -c %s "$1") + model_size + 2 * align + 65536))
  [ "$size" -ge $((1 << 32)) ]
}

side_file=$out_dir/$name
write_side_file() {  # write_side_file SOURCE DEST
  local src=$1 dest=$2
  if [ -e "$dest" ] && [ "$dest" -ef "$src" ]; then
    return
  fi
  local tmp="$dest.tmp"
  tmps+=("$tmp")
  cp "$src" "$tmp" || die "cannot copy $src to $tmp"
  chmod 644 "$tmp"
  mv -f "$tmp" "$dest" || die "cannot rename $tmp to $dest"
  say "wrote $dest (beside the executables)"
}

side_written=0
for t in "${targets[@]}"; do
  dest=$(output_of "$t")
  bin=${engine[$t]}
  tmp="$dest.tmp"
  tmps+=("$tmp")
  files=("$model")
  [ -z "$mmproj" ] || files+=("$mmproj")
  files+=("$work/.args")
  if [ "$side" = 1 ] || { [ "$t" = windows-x86_64 ] && too_big_for_windows "$bin"; }; then
    if [ "$side" != 1 ]; then
      say "$dest would be over 4 GiB, which Windows refuses to run: the weights go beside it as $side_file (keep the two together)"
    fi
    files=("$work/.args")
    if [ "$side_written" = 0 ]; then
      write_side_file "$model" "$side_file"
      [ -z "$mmproj" ] || write_side_file "$mmproj" "$out_dir/$mmproj_name"
      side_written=1
    fi
  fi
  cp "$bin" "$tmp" || die "cannot copy $bin to $tmp"
  chmod 755 "$tmp"
  "$ZIPALIGN_BIN" -j -a "$align" "$tmp" "${files[@]}" || die "zipalign failed"
  mv -f "$tmp" "$dest" || die "cannot rename $tmp to $dest"
  say "wrote $dest ($(stat -c %s "$dest") bytes, $t)"
done
