#!/usr/bin/env bash
# llama.cpp's ggml as a CPU peer of `moex bench` (issue #15): fetches the llama.cpp sources that PyPI's
# llama-cpp-python sdist ships (vendor/llama.cpp; no Debian package carries ggml), builds ggml's CPU backend as a user
# would (cmake, Release, GGML_NATIVE, its own OpenMP threading), compiles bench/peers/ggml_experts.cpp against it,
# and runs it with this script's arguments (see that file: --shapes, --tokens, --weights f16|bf16|f32|q8_0,
# --threads, --json). Nothing of ggml enters this repository: the sources and the build live in the cache folder.
# For a machine that cannot reach PyPI (the GPU machine's Xeon host): GGML_MARCH=<gcc -march name> builds here for
# that CPU (GGML_NATIVE off; ggml's ISA switches and -march from what gcc enables for that name), and
# GGML_EXPERTS_BIN=<that binary> there runs it without sources or a build:
#   GGML_MARCH=sapphirerapids bash bench/peers/ggml.sh --help     # prints the binary's path last
# Env: MOEX_PEERS_DIR (default ~/.cache/moex/peers), LLAMA_CPP_PYTHON (the sdist version, default 0.3.36),
#      JOBS (build parallelism, default nproc), GGML_MARCH, GGML_EXPERTS_BIN.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[[ -n ${GGML_EXPERTS_BIN:-} ]] && exec "$GGML_EXPERTS_BIN" "$@"
VERSION=${LLAMA_CPP_PYTHON:-0.3.36}
DIR=${MOEX_PEERS_DIR:-$HOME/.cache/moex/peers}/llama-cpp-python-$VERSION
LLAMA=$DIR/llama_cpp_python-$VERSION/vendor/llama.cpp
SRC=$LLAMA/ggml
MARCH=${GGML_MARCH:-native}
BUILD=$DIR/build${GGML_MARCH:+-$GGML_MARCH}
BIN=$DIR/ggml_experts${GGML_MARCH:+-$GGML_MARCH}
mkdir -p "$DIR"

# ggml's CPU options for a -march other than this CPU's: each switch on when gcc predefines its macro for that name.
isa_args() {
    [[ $MARCH == native ]] && { echo -DGGML_NATIVE=ON; return; }
    local macros
    macros=$(gcc -march="$MARCH" -dM -E - </dev/null) || { echo "ggml.sh: gcc knows no -march=$MARCH" >&2; exit 1; }
    printf '%s\n' -DGGML_NATIVE=OFF "-DCMAKE_C_FLAGS=-march=$MARCH" "-DCMAKE_CXX_FLAGS=-march=$MARCH"
    local pair
    for pair in AVX:__AVX__ AVX2:__AVX2__ FMA:__FMA__ F16C:__F16C__ AVX_VNNI:__AVXVNNI__ AVX512:__AVX512F__ \
        AVX512_VBMI:__AVX512VBMI__ AVX512_VNNI:__AVX512VNNI__ AVX512_BF16:__AVX512BF16__ AMX_TILE:__AMX_TILE__ \
        AMX_INT8:__AMX_INT8__ AMX_BF16:__AMX_BF16__; do
        if grep -q "#define ${pair#*:} " <<<"$macros"; then echo "-DGGML_${pair%%:*}=ON"; else echo "-DGGML_${pair%%:*}=OFF"; fi
    done
}

if [[ ! -f $SRC/CMakeLists.txt ]]; then
    echo "ggml.sh: fetching llama-cpp-python $VERSION's sdist from PyPI" >&2
    python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$DIR" >&2
    tar xzf "$DIR/llama_cpp_python-$VERSION.tar.gz" -C "$DIR"
fi
if [[ ! -f $BUILD/bin/.ggml-built ]]; then
    echo "ggml.sh: building ggml (CPU backend, -march=$MARCH) from $SRC" >&2
    mapfile -t isa < <(isa_args)
    # configured from llama.cpp's top level (the sdist's ggml folder lacks the files of a standalone ggml build)
    cmake -S "$LLAMA" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF "${isa[@]}" \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF >"$BUILD.log" 2>&1 || { tail -20 "$BUILD.log" >&2; exit 1; }
    cmake --build "$BUILD" -j "${JOBS:-$(nproc)}" --target ggml ggml-cpu >>"$BUILD.log" 2>&1 ||
        { tail -20 "$BUILD.log" >&2; exit 1; }
    mkdir -p "$BUILD/bin" && touch "$BUILD/bin/.ggml-built"
fi
if [[ ! -x $BIN || $ROOT/bench/peers/ggml_experts.cpp -nt $BIN ]]; then
    mapfile -t libs < <(find "$BUILD" -name 'libggml*.a' | sort -r)  # ggml, ggml-cpu, then ggml-base
    static=()  # a binary for another machine links everything in (that machine's C library may be older)
    [[ $MARCH != native ]] && static=(-static)
    c++ -std=c++20 -O2 -march="$MARCH" -I"$SRC/include" -I"$ROOT" "$ROOT/bench/peers/ggml_experts.cpp" \
        -Wl,--start-group "${libs[@]}" -Wl,--end-group -fopenmp -lpthread -ldl "${static[@]}" -o "$BIN"
fi
if [[ $MARCH != native ]]; then  # built for another CPU: do not run it here
    echo "$BIN"
    exit 0
fi
exec "$BIN" "$@"
