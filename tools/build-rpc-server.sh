#!/usr/bin/env bash
# Builds llama.cpp's RPC worker, ggml-rpc-server (the rpc-server of llama.cpp's docs), alone, from
# the llama-cpp-python source package (Python package registry), for tests/rpc.rs. When the full
# reference build (../shared/bench/build-llama-cpp.sh) already made it, that one is used. Prints
# the binary's path; the tests find it there, or through $LLAMAFILE_RPC_SERVER.
#
#   tools/build-rpc-server.sh            into ~/.cache/llama-cpp-ref/bin (or $LLAMA_CPP_REF/bin)
#
# The worker is built for baseline x86-64 (GGML_NATIVE off), so the one build runs on any CI
# machine; only the ggml-rpc-server target and the ggml libraries it links are compiled.
set -euo pipefail
DEST=${LLAMA_CPP_REF:-$HOME/.cache/llama-cpp-ref}
VER=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
if [ -x "$DEST/bin/ggml-rpc-server" ]; then echo "$DEST/bin/ggml-rpc-server"; exit 0; fi
mkdir -p "$DEST/src"
cd "$DEST/src"
python3 -m pip install -q cmake >&2
[ -f "llama_cpp_python-$VER.tar.gz" ] || \
  python3 -m pip download -q --no-deps --no-binary :all: --no-build-isolation -d . "llama-cpp-python==$VER" >&2
[ -f "llama_cpp_python-$VER/vendor/llama.cpp/CMakeLists.txt" ] || tar xzf "llama_cpp_python-$VER.tar.gz"
cd "llama_cpp_python-$VER/vendor/llama.cpp"
cmake -B build-rpc -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_RPC=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF >&2
cmake --build build-rpc -j"$(nproc)" --target ggml-rpc-server >&2
mkdir -p "$DEST/bin"
cp -a build-rpc/bin/. "$DEST/bin/"
echo "$DEST/bin/ggml-rpc-server"
