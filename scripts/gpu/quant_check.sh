#!/usr/bin/env bash
# The quantized experts on an H200 in ONE call (issue #11): build the CLI and the test binary (preset gpu), the
# quantized CUDA tests and the SASS census, `moex bench` on the FP8 / FP4 cases (A/B switches given as
# VAR=VALUE words in AB), and ncu's per-kernel times of one FP8 prefill call; a short table last.
# Usage: bash scripts/gpu/quant_check.sh [--steps build,test,bench,ab,ncu,ncu_decode]
# Env: OUT, BUILD_DIR (build-gpu), JOBS (16), BUDGET_S (570), TEST_FILTER (ctest -R regex), BENCH (moex bench
#      argument lines, ';'-separated), AB (env switches timed against the default on AB_ARGS), NCU_SHAPE, NCU_TOKENS.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
STEPS="build,test,bench,ab,ncu"
[[ "${1:-}" == "--steps" ]] && STEPS=${2:?}
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
OUT=${OUT:-$BUILD/quant-check}
JOBS=${JOBS:-16}
BUDGET_S=${BUDGET_S:-570}
# shellcheck source=scripts/gpu/lib.sh
source "$ROOT/scripts/gpu/lib.sh"
want() { [[ ",$STEPS," == *",$1,"* ]]; }
CLI="$BUILD/moex"
trap 'echo; echo "==== quant_check summary ($(($(date +%s) - START))s; logs in $OUT) ===="; cat "$SUMMARY"' EXIT

if want build; then
    mapfile -t deps < <(deps_cmake_args)
    box configure 120 "$OUT/build.log" cmake --preset gpu -B "$BUILD" "-DCMAKE_CUDA_COMPILER=$(command -v nvcc)" \
        "${deps[@]}" || fail_step configure "see build.log"
    box build 360 "$OUT/build.log" cmake --build "$BUILD" -j "$JOBS" --target moex moex_tests
    rc=$?
    if ((rc == 0)); then record build OK "moex, moex_tests"
    else fail_step build "$(grep -m4 -E 'error|FAILED' "$OUT/build.log" | tr '\n' ' ' | cut -c1-400)"; fi
fi

if want test; then
    ctest_step test 150 "$OUT/test.log" -R "${TEST_FILTER:-Quant.*Cuda|GroupedGemmSm90|sass}" -j 8
fi

# bench: each ';'-separated line is one `moex bench --device cuda` invocation.
if want bench; then
    IFS=';' read -ra lines <<<"${BENCH:---shapes qwen3-30b-a3b,deepseek-v3 --tokens 4096,16384 --backends grouped_mm --quant fp8_block --case-seconds 0.2}"
    i=0
    for line in "${lines[@]}"; do
        i=$((i + 1))
        # shellcheck disable=SC2086  # a line is a list of words
        box bench 150 "$OUT/bench$i.log" "$CLI" bench --device cuda $line --json-file "$OUT/bench$i.jsonl"
        grep -E '^[a-z0-9.-]+ +[0-9]+ ' "$OUT/bench$i.log" >>"$OUT/bench.txt"
    done
    record bench OK "$(grep -c . "$OUT/bench.txt") rows"
fi

# ab: the same cases with each switch of AB set (e.g. MOEX_FUSED_H_QUANT=0), after and before the default.
if want ab && [[ -n "${AB:-}" ]]; then
    for sw in $AB; do
        # shellcheck disable=SC2086
        box ab 90 "$OUT/ab.log" env "$sw" "$CLI" bench --device cuda ${AB_ARGS:-} && box ab 90 "$OUT/ab.log" "$CLI" \
            bench --device cuda ${AB_ARGS:-}
        { echo "-- $sw, then default:"; grep -E '^[a-z0-9.-]+ +[0-9]+ ' "$OUT/ab.log"; } >"$OUT/ab.txt"
    done
    record ab OK "$AB"
fi

# ncu: the kernels of one FP8 prefill call (make-problem, then `moex experts run` under ncu, clocks left alone), as
# built and with each AB switch; then the warp stalls of its first grouped GEMM (the up projection).
if want ncu && command -v ncu >/dev/null; then
    P=$OUT/ncu_problem.safetensors
    box ncu 60 "$OUT/ncu.log" "$CLI" experts make-problem --shape "${NCU_SHAPE:-qwen3-30b-a3b}" \
        --tokens "${NCU_TOKENS:-16384}" --quant fp8_block --out "$P"
    : >"$OUT/ncu.txt"
    for sw in default ${AB:-}; do
        [[ $sw == default ]] && sw=MOEX_NCU_DEFAULT=1
        : >"$OUT/ncu_one.log"
        box ncu 90 "$OUT/ncu_one.log" env "$sw" ncu --clock-control none --section SpeedOfLight "$CLI" experts run \
            --problem "$P" --backend grouped_mm --device cuda --out "$OUT/o.safetensors"
        { echo "-- $sw"; awk '/^  [a-zA-Z_].*Context/ { n = substr($1, 1, 60) } /Duration/ { print $(NF - 1), $NF, n }' \
            "$OUT/ncu_one.log"; } >>"$OUT/ncu.txt"
        cat "$OUT/ncu_one.log" >>"$OUT/ncu.log"
    done
    box ncu 120 "$OUT/ncu_stall.log" ncu --clock-control none -k regex:grouped_gemm_sm90 -c 1 --section \
        WarpStateStats --section SpeedOfLight --section InstructionStats "$CLI" experts run --problem "$P" \
        --backend grouped_mm --device cuda --out "$OUT/o.safetensors"
    grep -E 'Stall|Duration|Issued|Executed Ipc|Throughput|Warp Cycles' "$OUT/ncu_stall.log" | cut -c1-120 \
        >>"$OUT/ncu.txt"
    rm -f "$P" "$OUT/ncu_one.log" "$OUT/o.safetensors"
    record ncu OK "$(grep -c . "$OUT/ncu.txt") lines"
fi
# ncu_decode: where a decode call's time goes (speed of light, warp stalls, memory) on one FP8 decode call.
if want ncu_decode && command -v ncu >/dev/null; then
    P=$OUT/ncu_decode.safetensors
    box ncu_decode 30 "$OUT/ncu_decode.log" "$CLI" experts make-problem --shape "${DECODE_SHAPE:-deepseek-v3}" \
        --tokens "${DECODE_TOKENS:-1}" --quant fp8_block --max-gb 30 --out "$P" &&
        box ncu_decode 120 "$OUT/ncu_decode.log" ncu --clock-control none --section SpeedOfLight --section \
            WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy "$CLI" experts \
            run --problem "$P" --backend batched_mm --device cuda --out "$OUT/o.safetensors"
    awk '/^  [a-zA-Z_].*Context/ { print "--", substr($1, 1, 60) } /Duration|Memory Throughput|DRAM Throughput|Stall|Achieved Occupancy|Registers Per/' \
        "$OUT/ncu_decode.log" | cut -c1-110 >"$OUT/ncu_decode.txt"
    rm -f "$P" "$OUT/o.safetensors"
    record ncu_decode OK "$(grep -c '^--' "$OUT/ncu_decode.txt") kernels"
fi

rm -f "$OUT"/*.jsonl "$OUT"/*.xml  # at most 8 files come back from the GPU machine: the logs and tables
for f in bench ab ncu ncu_decode; do [[ -s "$OUT/$f.txt" ]] && { echo "---- $f ----"; cat "$OUT/$f.txt"; }; done
exit "$FAILED"
