#!/usr/bin/env bash
# Expert parallelism on a multi-GPU host in ONE call: configure (CUDA + NCCL, no tests), build moex_ep_check and
# moex_ep_bench with ninja, run the check on N ranks (every backend vs a single-GPU run) and the deepseek-v3 benchmark;
# a short table last. Logs go to $OUT (default build-ep-gpu/ep-check). Usage: bash scripts/ep_gpu_check.sh [N=2]
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
N=${1:-2}
BUILD=${BUILD_DIR:-$ROOT/build-ep-gpu}
OUT=${OUT:-$BUILD/ep-check}
DEPS=${MOEX_DEPS:-$ROOT/.deps}
mkdir -p "$BUILD" "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ -d /usr/local/cuda/bin ]] && export PATH="/usr/local/cuda/bin:$PATH"
SUMMARY=()
record() { SUMMARY+=("$(printf '%-10s %-6s %s' "$1" "$2" "$3")"); }
finish() {
    [[ -s "$OUT/ep_check.log" ]] && { echo "---- moex_ep_check ($N ranks) ----"; grep '^\[r0\]' "$OUT/ep_check.log" | cut -c6-; }
    [[ -s "$OUT/ep_bench.log" ]] && { echo "---- moex_ep_bench ($N ranks) ----"; grep '^\[r0\]' "$OUT/ep_bench.log" | cut -c6-; }
    echo "================ moex ep_gpu_check summary (logs in $OUT) ================"
    printf '%s\n' "${SUMMARY[@]}"
}
trap finish EXIT

{ nvidia-smi -L; nvidia-smi topo -m; nvcc --version | tail -1; } >"$OUT/env.txt" 2>&1
record env OK "$(nvidia-smi -L 2>/dev/null | wc -l) GPU(s); $(nvcc --version 2>/dev/null | grep -Eo 'release [0-9.]+')"

# Configure: the deps prefix as scripts/gpu_check.sh uses it; tests off (the EP programs need no GoogleTest).
args=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEX_CUDA=ON -DMOEX_TESTS=OFF -DMOEX_NCCL=ON
      -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20)
command -v nvcc >/dev/null && args+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
if [[ -d "$DEPS/usr" ]]; then
    p="$DEPS/usr"
    args+=("-DCMAKE_PREFIX_PATH=$p")
    for pair in fmt:lib/x86_64-linux-gnu/cmake/fmt nlohmann_json:share/cmake/nlohmann_json CLI11:share/cmake/CLI11; do
        [[ -d "$p/${pair#*:}" ]] && args+=("-D${pair%%:*}_DIR=$p/${pair#*:}")
    done
fi
if cmake "${args[@]}" >"$OUT/configure.log" 2>&1; then
    record configure OK "$(grep -o 'moex EP: NCCL transport [A-Z]* ([^)]*)' "$OUT/configure.log" | head -1)"
else
    record configure FAIL "$(grep -m3 -E 'Error|error' "$OUT/configure.log" | tr '\n' ' ' | cut -c1-300)"; exit 1
fi
if timeout 900 ninja -C "$BUILD" -j "${JOBS:-16}" moex_ep_check moex_ep_bench >"$OUT/build.log" 2>&1; then
    record build OK "moex_ep_check, moex_ep_bench"
else
    record build FAIL "$(grep -m4 -E 'error|FAILED' "$OUT/build.log" | tr '\n' ' ' | cut -c1-400)"; exit 1
fi
prog() { echo "$BUILD/tools/ep/$1"; }
timeout 300 bash scripts/ep_launch.sh "$N" "$(prog moex_ep_check)" >"$OUT/ep_check.log" 2>&1
rc=$?
record ep_check "$( ((rc == 0)) && echo PASS || echo FAIL)" "rc=$rc; $(grep -h 'failure(s)' "$OUT/ep_check.log" | head -1 | cut -c6-)"
timeout 300 bash scripts/ep_launch.sh "$N" "$(prog moex_ep_bench)" --tokens "${EP_TOKENS:-512,4096}" >"$OUT/ep_bench.log" 2>&1
rc=$?
record ep_bench "$( ((rc == 0)) && echo OK || echo FAIL)" "rc=$rc; see $OUT/ep_bench.log"
