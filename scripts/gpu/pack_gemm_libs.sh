#!/usr/bin/env bash
# bench/gemm_libs (moex_gemm_libs: the grouped expert GEMMs through moex, oneDNN, MKL, OpenBLAS) for the GPU machine's
# AMX Xeon host, which has no oneDNN: builds it here against Debian's libdnnl-dev (apt install libdnnl-dev
# ocl-icd-opencl-dev) and copies it with libdnnl.so.2 and the OpenCL loader it links into .gpubin/gemm-libs (~42 MB;
# carry `.deps` and `.gpubin/gemm-libs`). Usage: bash scripts/gpu/pack_gemm_libs.sh [BUILD_DIR=build]
# Then on the device: LD_LIBRARY_PATH=$PWD/.gpubin/gemm-libs:$PWD/.deps/usr/lib/x86_64-linux-gnu OMP_NUM_THREADS=16
#   taskset -c 0-15 .gpubin/gemm-libs/moex_gemm_libs --shapes qwen3-30b-a3b,mixtral-8x7b --dtypes bf16
#   --libs moex,onednn --tokens 64,512 --threads 16
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
[[ -f $build/CMakeCache.txt ]] || cmake --preset release -B "$build" -DMOEX_CUDA=OFF
cmake --build "$build" --target moex_gemm_libs -j "$(nproc)"
bin=$build/bench/moex_gemm_libs
ldd "$bin" | grep -q libdnnl || { echo "pack_gemm_libs: $bin was built without oneDNN (see CMake's message)" >&2; exit 1; }
dst=.gpubin/gemm-libs
rm -rf "$dst"
mkdir -p "$dst"
cp "$bin" "$dst/"
for lib in libdnnl.so.2 libOpenCL.so.1; do cp -L "$(ldd "$bin" | awk -v l="$lib" '$1 == l {print $3}')" "$dst/$lib"; done
echo "packed into $dst ($(du -sh "$dst" | cut -f1))"
