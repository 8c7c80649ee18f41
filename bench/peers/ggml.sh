#!/usr/bin/env bash
# llama.cpp's ggml as a CPU peer of `moex bench` (issue #15): fetches the llama.cpp sources that PyPI's
# llama-cpp-python sdist ships (vendor/llama.cpp; no Debian package carries ggml), builds ggml's CPU backend as a user
# would (cmake, Release, GGML_NATIVE, its own OpenMP threading), compiles bench/peers/ggml_experts.cpp against it,
# and runs it with this script's arguments (see that file: --shapes, --tokens, --weights f16|bf16|f32|q8_0,
# --threads, --json). Nothing of ggml enters this repository: the sources and the build live in the cache folder.
# Env: MOEX_PEERS_DIR (default ~/.cache/moex/peers), LLAMA_CPP_PYTHON (the sdist version, default 0.3.36),
#      JOBS (build parallelism, default nproc).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VERSION=${LLAMA_CPP_PYTHON:-0.3.36}
DIR=${MOEX_PEERS_DIR:-$HOME/.cache/moex/peers}/llama-cpp-python-$VERSION
LLAMA=$DIR/llama_cpp_python-$VERSION/vendor/llama.cpp
SRC=$LLAMA/ggml
BIN=$DIR/ggml_experts
mkdir -p "$DIR"

if [[ ! -f $SRC/CMakeLists.txt ]]; then
    echo "ggml.sh: fetching llama-cpp-python $VERSION's sdist from PyPI" >&2
    python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$DIR" >&2
    tar xzf "$DIR/llama_cpp_python-$VERSION.tar.gz" -C "$DIR"
fi
if [[ ! -f $DIR/build/bin/.ggml-built ]]; then
    echo "ggml.sh: building ggml (CPU backend) from $SRC" >&2
    # configured from llama.cpp's top level (the sdist's ggml folder lacks the files of a standalone ggml build)
    cmake -S "$LLAMA" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF >"$DIR/build.log" 2>&1 || { tail -20 "$DIR/build.log" >&2; exit 1; }
    cmake --build "$DIR/build" -j "${JOBS:-$(nproc)}" --target ggml ggml-cpu >>"$DIR/build.log" 2>&1 ||
        { tail -20 "$DIR/build.log" >&2; exit 1; }
    mkdir -p "$DIR/build/bin" && touch "$DIR/build/bin/.ggml-built"
fi
if [[ ! -x $BIN || $ROOT/bench/peers/ggml_experts.cpp -nt $BIN ]]; then
    mapfile -t libs < <(find "$DIR/build" -name 'libggml*.a' | sort -r)  # ggml, ggml-cpu, then ggml-base
    c++ -std=c++20 -O2 -march=native -I"$SRC/include" -I"$ROOT" "$ROOT/bench/peers/ggml_experts.cpp" \
        -Wl,--start-group "${libs[@]}" -Wl,--end-group -fopenmp -lpthread -ldl -o "$BIN"
fi
exec "$BIN" "$@"
