#!/usr/bin/env bash
# Expert parallelism on a multi-GPU host in ONE call: configure (CMake preset `ep`: CUDA + NCCL, no tests), build
# moex_ep_check and moex_ep_bench, run the check on N ranks (every backend vs a single-GPU run) and the deepseek-v3
# benchmark; a short table last. Logs go to $OUT (default build-ep-gpu/ep-check). Usage: bash scripts/ep_gpu_check.sh [N=2]
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
N=${1:-2}
BUILD=${BUILD_DIR:-$ROOT/build-ep-gpu}
OUT=${OUT:-$BUILD/ep-check}
BUDGET_S=${BUDGET_S:-900}
# shellcheck source=scripts/gpu/lib.sh
source "$ROOT/scripts/gpu/lib.sh"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
finish() {
    [[ -s "$OUT/ep_check.log" ]] && { echo "---- moex_ep_check ($N ranks) ----"; grep '^\[r0\]' "$OUT/ep_check.log" | cut -c6-; }
    [[ -s "$OUT/ep_bench.log" ]] && { echo "---- moex_ep_bench ($N ranks) ----"; grep '^\[r0\]' "$OUT/ep_bench.log" | cut -c6-; }
    echo "================ moex ep_gpu_check summary (logs in $OUT) ================"
    cat "$SUMMARY"
}
trap finish EXIT

{ nvidia-smi -L; nvidia-smi topo -m; nvcc --version | tail -1; } >"$OUT/env.txt" 2>&1
record env OK "$(nvidia-smi -L 2>/dev/null | wc -l) GPU(s); $(nvcc --version 2>/dev/null | grep -Eo 'release [0-9.]+')"

# NCCL: the toolkit's or the system's, else the nvidia-nccl wheel of the image's PyTorch (it ships libnccl.so.2 only).
nccl_root=${NCCL_ROOT:-$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null)}
mapfile -t deps < <(deps_cmake_args)
if box configure 180 "$OUT/configure.log" cmake --preset ep -B "$BUILD" "-DCMAKE_CUDA_COMPILER=$(command -v nvcc)" \
    "-DNCCL_ROOT=$nccl_root" "${deps[@]}"; then
    record configure OK "$(grep -o 'EP NCCL transport [A-Z]*' "$OUT/configure.log" | head -1)"
else fail_step configure "$(grep -m3 -E 'Error|error' "$OUT/configure.log" | tr '\n' ' ' | cut -c1-300)"; exit 1; fi
if box build 600 "$OUT/build.log" cmake --build "$BUILD" -j "${JOBS:-16}" --target moex_ep_check moex_ep_bench; then
    record build OK "moex_ep_check, moex_ep_bench"
else
    fail_step build "$(grep -m4 -E 'error|FAILED' "$OUT/build.log" | tr '\n' ' ' | cut -c1-400)"; exit 1
fi
box ep_check 300 "$OUT/ep_check.log" bash scripts/ep_launch.sh "$N" "$BUILD/tools/ep/moex_ep_check"
rc=$?
record ep_check "$( ((rc == 0)) && echo PASS || echo FAIL)" "rc=$rc; $(grep -h 'failure(s)' "$OUT/ep_check.log" | head -1 | cut -c6-)"
((rc == 0)) || FAILED=1
box ep_bench 300 "$OUT/ep_bench.log" bash scripts/ep_launch.sh "$N" "$BUILD/tools/ep/moex_ep_bench" \
    --tokens "${EP_TOKENS:-512,4096}"
rc=$?
record ep_bench "$( ((rc == 0)) && echo OK || echo FAIL)" "rc=$rc; see $OUT/ep_bench.log"
exit $FAILED
