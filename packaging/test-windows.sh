#!/usr/bin/env bash
# Cross-builds the Windows engine (x86_64-pc-windows-gnu, Debian's mingw-w64 linker), packs
# SmolLM2 into a `.exe` with make-llamafile.sh, and runs it under wine beside the x86-64 Linux
# llamafile: the same greedy tokens on the reference prompts, the same `--tokenize` output, and
# its server answering `/health` and one chat completion with the same text
# (packaging/compare-llamafiles.py); then an .exe whose weights lie beside it, and one made
# from the Linux llamafile by the Windows engine's --upgrade-engine. Installs nothing; exit
# status 2 says what is missing (and means nothing else: any other failure is status 1).
#
# Wine runs in its own prefix, $WINEPREFIX (default ~/.cache/llamafile-rs/wine; the first start
# creates it, which takes a while). Wine 8 lacks bcryptprimitives.dll, which Rust's standard
# library imports (Windows 10 and later have it), so a stand-in built from
# packaging/wine/bcryptprimitives.c is put into that prefix only.
#
# Set CARGO_TARGET_DIR to build elsewhere than target/; LLAMAFILE_MODELS for the model cache.
set -euo pipefail
cd "$(dirname "$0")/.."

target=x86_64-pc-windows-gnu
model="${LLAMAFILE_MODELS:-$HOME/.cache/llamafile-rs/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
missing=()
[ -d "$(rustc --print sysroot)/lib/rustlib/$target" ] \
  || missing+=("Rust's $target standard library (rustup target add $target)")
command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 \
  || missing+=("the linker x86_64-w64-mingw32-gcc (apt-get install mingw-w64)")
command -v wine >/dev/null 2>&1 || missing+=("wine (apt-get install wine wine64)")
command -v python3 >/dev/null 2>&1 || missing+=("python3")
[ -f "$model" ] || missing+=("$model (packaging/fetch-models.sh smollm2)")
if [ ${#missing[@]} -gt 0 ]; then
  echo "test-windows: missing:" >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 2
fi

# From here on a failing command fails the check (1), whatever its own status: .ci/run reads 2
# as "a tool is missing" and skips.
trap 'exit 1' ERR

target_dir=${CARGO_TARGET_DIR:-target}
cargo build --release --bin llamafile --bin zipalign
cargo build --release --target "$target" --bin llamafile --bin zipalign

# Wine's own error lines (not its fixme lines) go to each program's stderr, which
# compare-llamafiles.py prints when a program fails.
export WINEPREFIX="${WINEPREFIX:-$HOME/.cache/llamafile-rs/wine}" WINEDEBUG=-all,err+all
mkdir -p "$WINEPREFIX"

# Starts a wine session: the first program a new wine server runs makes the loader run
# `wineboot --init` (on a new prefix it creates the prefix first), which starts wine's service
# manager and its services; every program waits for that boot to finish before its own code
# runs. A trivial program does it, with its output apart from ours (the services inherit it).
# Not `wineboot -i`: as the first program it boots a second time after the loader's boot. That
# second boot resets the boot event, rewrites the registry's hardware and environment keys,
# and starts a second service manager, which for the next ~40 s starts its own copy of each
# service (several waiting out its 10 s start timeout) while services of one manager report
# to the other; and `wineboot -i` returns about 2 s before that second boot has finished.
start_session() {
  wine cmd /c exit </dev/null >/dev/null 2>&1 || {
    echo "test-windows: wine cannot start a program in $WINEPREFIX" >&2
    exit 1
  }
}

shim="$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"
if [ ! -f "$shim" ]; then
  echo "test-windows: creating the wine prefix $WINEPREFIX" >&2
  wineserver -w
  start_session
  # Wait for all the prefix's creation started (services, installers) and for its server.
  wineserver -w
  if [ ! -d "$(dirname "$shim")" ]; then
    echo "test-windows: wine did not create the prefix $WINEPREFIX" >&2
    exit 1
  fi
  x86_64-w64-mingw32-gcc -shared -O2 -o "$shim.$$.tmp" packaging/wine/bcryptprimitives.c -lbcrypt
  mv "$shim.$$.tmp" "$shim"
fi

# One wine server for all the runs below (each run would otherwise start and stop its own, and
# boot wine again); `-p` refuses while another server of this prefix runs, so wait for any to
# exit first.
wineserver -w
wineserver -p
work=$(mktemp -d)
trap 'wineserver -k; rm -rf "$work"' EXIT
start_session
export LLAMAFILE_BIN="$target_dir/release/llamafile" ZIPALIGN_BIN="$target_dir/release/zipalign"
export LLAMAFILE_BIN_WINDOWS_X86_64="$target_dir/$target/release/llamafile.exe"
packaging/make-llamafile.sh "$model" "$work/smollm2" --target linux-x86_64,windows-x86_64
linux="$work/smollm2-linux-x86_64.llamafile"
exe="$work/smollm2-windows-x86_64.exe"

status=0
python3 packaging/compare-llamafiles.py --label "windows .exe under wine" --exact \
  --reference "$linux" --candidate "wine $exe" --tokenize --server || status=1

# A model too large for a Windows executable: forced here with a small one. The .exe holds
# only .args and finds the weights beside itself, run from another directory.
mkdir "$work/side" "$work/elsewhere"
packaging/make-llamafile.sh "$model" "$work/side/smollm2.exe" --target windows-x86_64 --side-gguf
[ -f "$work/side/$(basename "$model")" ] || { echo "test-windows: no side file written" >&2; exit 1; }
(cd "$work/elsewhere" && python3 "$OLDPWD/packaging/compare-llamafiles.py" \
  --label "windows .exe with its weights beside it" --prompts short -n 16 --exact \
  --reference "$linux" --candidate "wine ../side/smollm2.exe") || status=1

# The Windows engine takes the Linux llamafile's weights and .args (--upgrade-engine), and
# zipalign.exe adds to the result in place (Windows replaces no open file: both close first).
engine="$target_dir/$target/release/llamafile.exe"
wine "$engine" --upgrade-engine "$linux" "$work/upgraded.exe" </dev/null
echo "a note" >"$work/note.txt"
wine "$target_dir/$target/release/zipalign.exe" -j "$work/upgraded.exe" "$work/note.txt" </dev/null
python3 packaging/compare-llamafiles.py --label "windows .exe upgraded from the Linux llamafile" \
  --prompts short -n 16 --exact --reference "$linux" --candidate "wine $work/upgraded.exe" \
  || status=1
exit "$status"
