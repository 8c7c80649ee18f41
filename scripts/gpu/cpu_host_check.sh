#!/usr/bin/env bash
# The GPU machine's host CPU (a 16-core Xeon with AMX) in one call, for issue #15: a CPU-only release build (no CUDA:
# a minute on 16 cores instead of the CUDA build's three), the CPU suite on it, thread scaling (bench/cpu_scaling.sh)
# the side by side with transformers and llama.cpp (bench/cpu_side_by_side.sh; ggml's binary for that CPU built
# here by `GGML_MARCH=sapphirerapids bash bench/peers/ggml.sh --help` and carried as .peers/cpu), and the quantized
# experts (FP8 blocks with dynamic activations, MXFP4, NVFP4) beside bf16 in `moex bench`. Logs, JSON and the tables
# go to $OUT; a summary table at the end.
# Usage: bash scripts/gpu/cpu_host_check.sh [--steps build,test,scaling,sbs,quant]
# Env: OUT, BUDGET_S (560), SCALING_TOKENS (512,1024), SCALING_EXTRA (moex bench options), SBS_THREADS (16), SBS_TOKENS (1,8,64,512,1024), SBS_SECONDS (1), QUANT_TOKENS (1,8,64,512,1024), QUANT_FORMATS (none,fp8_block,mxfp4,nvfp4)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
STEPS=build,test,scaling,sbs
[[ "${1:-}" == "--steps" ]] && STEPS=${2:?}
OUT=${OUT:-$ROOT/build-cpu/host-check}
BUDGET_S=${BUDGET_S:-560}
BUILD=$ROOT/build-cpu
# shellcheck source=scripts/gpu/lib.sh
source "$ROOT/scripts/gpu/lib.sh"
want() { [[ ",$STEPS," == *",$1,"* ]]; }
finish() {
    for f in scaling.md sbs.md quant.md; do [[ -s $OUT/$f ]] && { echo "---- $f ----"; cat "$OUT/$f"; }; done
    echo "================ moex cpu_host_check summary ($(($(date +%s) - START))s; logs in $OUT) ================"
    cat "$SUMMARY"
}
trap finish EXIT
lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-160 >"$OUT/cpu.txt"

if want build; then
    mapfile -t deps < <(deps_cmake_args)
    if box configure 120 "$OUT/build.log" cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEX_CUDA=OFF \
        "${deps[@]}" && box build 300 "$OUT/build.log" cmake --build "$BUILD" -j "${JOBS:-16}"; then
        record build PASS "$(grep -c 'Building' "$OUT/build.log") objects"
    else
        fail_step build "see build.log: $(grep -m2 -E 'error' "$OUT/build.log" | cut -c1-120 | tr '\n' ' ')"
        exit 1
    fi
fi
want test && ctest_step cpu-tests 200 "$OUT/test.log" -L cpu -LE install -j 16
if want scaling; then
    if box scaling 240 "$OUT/scaling.log" env MOEX="$BUILD/moex" KERNELS=default BACKENDS=grouped_mm \
        TOKENS="${SCALING_TOKENS:-512,1024}" OUT="$OUT/scaling.jsonl" EXTRA="${SCALING_EXTRA:---case-seconds 3 --reps 3}" \
        bash bench/cpu_scaling.sh; then
        sed -n '/^kernels /,$p' "$OUT/scaling.log" >"$OUT/scaling.md"
        record scaling PASS "$(($(wc -l <"$OUT/scaling.md") - 1)) rows"
    else
        fail_step scaling "see scaling.log"
    fi
fi
if want sbs; then
    ggml=$ROOT/.peers/cpu/ggml_experts-sapphirerapids
    threads=${SBS_THREADS:-16}
    if box sbs 300 "$OUT/sbs.log" env GGML_EXPERTS_BIN="$ggml" MOEX="$BUILD/moex" PY=python3 THREADS="$threads" \
        SECONDS_PER_CASE="${SBS_SECONDS:-1}" TOKENS="${SBS_TOKENS:-1,8,64,512,1024}" OUT="$OUT/sbs" \
        taskset -c "0-$((threads - 1))" bash bench/cpu_side_by_side.sh; then
        sed -n '/^|/,$p' "$OUT/sbs.log" >"$OUT/sbs.md"
        record sbs PASS "$threads threads"
    else
        fail_step sbs "see sbs.log"
    fi
fi
if want quant; then
    threads=${SBS_THREADS:-16}
    : >"$OUT/quant.md"
    for q in ${QUANT_FORMATS:-none fp8_block mxfp4 nvfp4}; do
        if box "quant-$q" 150 "$OUT/quant-$q.log" taskset -c "0-$((threads - 1))" "$BUILD/moex" bench \
            --shapes qwen3-30b-a3b,mixtral-8x7b --tokens "${QUANT_TOKENS:-1,8,64,512,1024}" --backends grouped_mm \
            --threads "$threads" --case-seconds 1 --reps 3 --quant "$q" --json-file "$OUT/quant-$q.jsonl"; then
            { echo "quant $q:"; grep -E '^(shape|qwen3|mixtral)' "$OUT/quant-$q.log"; } >>"$OUT/quant.md"
            record "quant-$q" PASS "$threads threads"
        else
            fail_step "quant-$q" "see quant-$q.log"
        fi
    done
fi
exit "$FAILED"
