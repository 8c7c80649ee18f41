#!/usr/bin/env bash
# GPU check of moex on an H200 in ONE call: configure (CMake preset `gpu`) + build, the CUDA tests (ctest -L cuda:
# every backend x cuda vs the float64 reference, graph capture, the model kernels, the sm_90a GEMM's own check), the
# SASS census (ctest -L sass), `moex bench --device cuda` (plain, then a --graph pass for T <= 64), compute-sanitizer
# (ctest -L sanitizer), the portable grouped GEMM forced (ctest -L portable); a summary table last. With BEFORE=a
# moex binary of an earlier commit, `compare` times it and this build in ABBA order on COMPARE_ARGS and prints
# after/before; BEFORE_SRC=a source tree (scripts/gpu/export_tree.sh REF, carried in .gpubin) has the `before` step
# build that binary here first; COMPARE_ENV="NAME=VALUE ..." instead makes `before` this build run with those
# variables set (an A/B switch such as MOEX_PACKED_ROWS=0: no second build). `kernels` prints ncu's per-kernel times and DRAM bytes of one call of each
# KERNELS_SHAPES shape at KERNELS_T, for this build and BEFORE. Logs go to $OUT (default build-gpu/gpu-check).
# Usage: bash scripts/gpu_check.sh
#          [--steps env,configure,build,cuda,sass,bench,before,compare,kernels,sanitizer,portable]
# Env: OUT, BUILD_DIR (build-gpu), JOBS (16), BUDGET_S (560), BENCH_ARGS (extra `moex bench` arguments),
#      CMAKE_ARGS (extra configure arguments, e.g. "-DMOEX_PYTHON=ON -DPython_EXECUTABLE=$(command -v python3)"),
#      BEFORE, BEFORE_SRC, COMPARE_ENV, COMPARE_ARGS, COMPARE_BOX_S (seconds per compare run, 70), KERNELS_SHAPES
#      (qwen3-30b-a3b),
#      KERNELS_T (16384), MOEX_DEPS (the dependencies from scripts/pack_deps.sh, default .deps).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
STEPS="env,configure,build,cuda,sass,bench,before,compare,sanitizer,portable"
[[ "${1:-}" == "--steps" ]] && STEPS=${2:?}
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
OUT=${OUT:-$BUILD/gpu-check}
JOBS=${JOBS:-16}
BUDGET_S=${BUDGET_S:-560}
# shellcheck source=scripts/gpu/lib.sh
source "$ROOT/scripts/gpu/lib.sh"
want() { [[ ",$STEPS," == *",$1,"* ]]; }
CLI="$BUILD/moex"

finish() {  # the tables last: they are what the tail of the output must show
    echo
    [[ -s "$OUT/sass.log" ]] && { echo "---- SASS census ----"; grep -E '^(ok|FAIL)' "$OUT/sass.log"; }
    [[ -s "$OUT/bench.txt" ]] && { echo "---- moex bench --device cuda (bf16; json in $OUT/bench*.jsonl) ----"; cat "$OUT/bench.txt"; }
    [[ -s "$OUT/compare.txt" ]] && { echo "---- before / after ----"; cat "$OUT/compare.txt"; }
    [[ -s "$OUT/kernels.txt" ]] && { echo "---- per kernel (ncu) ----"; cat "$OUT/kernels.txt"; }
    echo "================ moex gpu_check summary ($(($(date +%s) - START))s; logs in $OUT) ================"
    printf '%-11s %-8s %s\n' step status detail
    cat "$SUMMARY"
}
trap finish EXIT

if want env; then
    { date; uname -a; nvidia-smi; nvcc --version; cmake --version; ninja --version; g++ --version; } >"$OUT/env.txt" 2>&1
    gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
    record env OK "${gpu:-nvidia-smi missing}; nvcc $(nvcc --version 2>/dev/null | grep -Eo 'release [0-9.]+' | cut -d' ' -f2); cmake $(cmake --version 2>/dev/null | head -1 | awk '{print $3}')"
fi

if want configure; then
    mapfile -t deps < <(deps_cmake_args)
    read -ra extra <<<"${CMAKE_ARGS:-}"
    box configure 180 "$OUT/configure.log" cmake --preset gpu -B "$BUILD" "-DCMAKE_CUDA_COMPILER=$(command -v nvcc)" \
        "${deps[@]}" "${extra[@]}"
    rc=$?
    if ((rc == 0)); then record configure OK "preset gpu, ${#deps[@]} dependency paths from .deps"
    elif ((rc != 125)); then fail_step configure "$(grep -m3 -E 'Error|error|Could not find' "$OUT/configure.log" | tr '\n' ' ' | cut -c1-300)"; fi
fi

if want build; then
    box build 420 "$OUT/build.log" cmake --build "$BUILD" -j "$JOBS"
    rc=$?
    if ((rc == 0)); then record build OK "$(grep -c 'Building' "$OUT/build.log") objects; warnings: $(grep -c 'warning' "$OUT/build.log")"
    elif ((rc != 125)); then fail_step build "$(grep -m4 -E 'error|FAILED' "$OUT/build.log" | tr '\n' ' ' | cut -c1-400)"; fi
fi

want cuda && ctest_step cuda 240 "$OUT/cuda.log" -L cuda -LE 'sanitizer|portable' -j 8
want sass && ctest_step sass 120 "$OUT/sass.log" -L sass -V

# moex bench --device cuda: full model sizes, bf16, batched_mm / grouped_mm, then the same under CUDA graphs.
if want bench; then
    if [[ -x "$CLI" ]]; then
        rm -f "$OUT"/bench.log "$OUT"/bench_graph.log "$OUT"/bench*.jsonl "$OUT"/bench.txt
        # shellcheck disable=SC2086  # BENCH_ARGS is a list of words
        box bench 100 "$OUT/bench.log" "$CLI" bench --device cuda --json-file "$OUT/bench.jsonl" ${BENCH_ARGS:-}
        rc=$? rc_graph=125
        if ((rc != 125)); then
            # shellcheck disable=SC2086
            box bench 45 "$OUT/bench_graph.log" "$CLI" bench --device cuda --graph --tokens 1,8,64 \
                --json-file "$OUT/bench_graph.jsonl" ${BENCH_ARGS:-}
            rc_graph=$?
        fi
        {  # rows, notes and errors; the header and column legend stay in bench.log (the output tail is short)
            grep -vE '^(== |host:|floor terms:|columns:|  )' "$OUT/bench.log"
            [[ -f "$OUT/bench_graph.log" ]] && grep -E '^[^ ].*\+graph|^note|^moex: error' "$OUT/bench_graph.log"
        } >"$OUT/bench.txt"
        n=$(cat "$OUT"/bench*.jsonl 2>/dev/null | grep -c '"kind":"result"')
        bad=$(cat "$OUT"/bench*.jsonl 2>/dev/null | grep -cE '"(output_ok|check_ok)":false')
        if ((rc == 0 && (rc_graph == 0 || rc_graph == 125))); then record bench OK "$n results ($bad with NaN or MISMATCH)"
        elif ((rc != 125)); then fail_step bench "rc=$rc, graph rc=$rc_graph; $n results ($bad bad)"; fi
    else
        record bench SKIP "no $CLI"
    fi
fi

# The earlier commit's moex from BEFORE_SRC (CLI only, tests off), into build-before beside this build.
if want before && [[ -n "${BEFORE_SRC:-}" ]]; then
    mapfile -t deps < <(deps_cmake_args)
    BEFORE_BUILD=$ROOT/build-before
    box before 60 "$OUT/before.log" cmake -S "$BEFORE_SRC" -B "$BEFORE_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DMOEX_CUDA=ON -DMOEX_TESTS=OFF "-DCMAKE_CUDA_COMPILER=$(command -v nvcc)" "${deps[@]}" &&
        box before 300 "$OUT/before.log" cmake --build "$BEFORE_BUILD" -j "$JOBS" --target moex
    rc=$?
    if ((rc == 0)); then BEFORE=${BEFORE:-$BEFORE_BUILD/moex}; record before OK "$BEFORE_SRC -> $BEFORE"
    elif ((rc != 125)); then
        fail_step before "rc=$rc (124: timed out) $(grep -m3 -E 'error|FAILED' "$OUT/before.log" | tr '\n' ' ' |
            cut -c1-300)"
    fi
fi

# Before / after: the earlier binary (or this build under COMPARE_ENV) and this build, ABBA, on the same cases.
[[ -n "${COMPARE_ENV:-}" ]] && BEFORE=$CLI
# shellcheck disable=SC2206  # COMPARE_ENV is a list of words
before_env=(${COMPARE_ENV:-})
if want compare && [[ -n "${BEFORE:-}" ]]; then
    # shellcheck disable=SC2206  # COMPARE_ARGS is a list of words
    args=(bench --device cuda ${COMPARE_ARGS:---shapes qwen3-30b-a3b,deepseek-v3 --tokens 1,64,4096})
    for run in before1:"$BEFORE" after1:"$CLI" after2:"$CLI" before2:"$BEFORE"; do
        run_env=()
        [[ $run == before* ]] && run_env=("${before_env[@]}")
        box compare "${COMPARE_BOX_S:-70}" "$OUT/compare.log" env "${run_env[@]}" "${run#*:}" "${args[@]}" \
            --json-file "$OUT/compare_${run%%:*}.jsonl"
    done
    if python3 "$ROOT/scripts/gpu/compare_bench.py" "$OUT"/compare_before*.jsonl -- "$OUT"/compare_after*.jsonl \
        >"$OUT/compare.txt" 2>&1; then record compare OK "$(tail -1 "$OUT/compare.txt")"
    else fail_step compare "$(tail -2 "$OUT/compare.txt" | tr '\n' ' ')"; fi
fi

# Per kernel: ncu's time and DRAM bytes of each kernel of one grouped_mm call (clocks left alone), this build and
# BEFORE (with COMPARE_ENV).
if want kernels && command -v ncu >/dev/null && [[ -x "$CLI" ]]; then
    : >"$OUT/kernels.txt"
    for shape in ${KERNELS_SHAPES:-qwen3-30b-a3b}; do
        P=$OUT/kernels_problem.safetensors
        box kernels 60 "$OUT/kernels.log" "$CLI" experts make-problem --shape "$shape" --tokens "${KERNELS_T:-16384}" \
            --out "$P" || continue
        for bin in after:"$CLI" ${BEFORE:+before:"$BEFORE"}; do
            run_env=()
            [[ $bin == before* ]] && run_env=("${before_env[@]}")
            box kernels 60 "$OUT/kernels_one.log" env "${run_env[@]}" ncu --clock-control none --metrics \
                gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum "${bin#*:}" experts run \
                --problem "$P" --backend grouped_mm --device cuda --out "$OUT/kernels_out.safetensors"
            { echo "== $shape T=${KERNELS_T:-16384} ${bin%%:*}"; python3 "$ROOT/scripts/gpu/ncu_kernels.py" \
                "$OUT/kernels_one.log"; } >>"$OUT/kernels.txt"
            cat "$OUT/kernels_one.log" >>"$OUT/kernels.log"
            : >"$OUT/kernels_one.log"
        done
        rm -f "$P" "$OUT/kernels_out.safetensors"
    done
    record kernels OK "$(grep -c '^==' "$OUT/kernels.txt") calls (kernels.txt)"
fi

want sanitizer && ctest_step sanitizer 420 "$OUT/sanitizer.log" -L sanitizer -j 4
want portable && ctest_step portable 150 "$OUT/portable.log" -L portable -j 8
exit $FAILED
