#!/usr/bin/env bash
# Linker wrapper: links Rust's unwinder statically (libgcc_eh.a) instead of libgcc_s.so, so the
# executable needs nothing beyond glibc (libc, libm, libpthread, libdl, the dynamic loader).
args=()
for a in "$@"; do
  case "$a" in
    -lgcc_s) args+=("-l:libgcc_eh.a") ;;
    *) args+=("$a") ;;
  esac
done
exec cc "${args[@]}"
