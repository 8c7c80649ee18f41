#!/usr/bin/env bash
# GPU check of moex on an H200 in ONE call: configure + build (Release, ninja), CUDA tests (every backend x cuda vs the
# float64 reference, graph capture, the portable GEMM forced), SASS census (HGMMA / UTMALDG / HMMA per kernel),
# `moex bench --device cuda` at full model sizes (CUDA events, floors, HF baselines, cross-checked outputs; a --graph
# pass for T <= 64), compute-sanitizer memcheck and racecheck on a small sweep; the bench table and a summary table at
# the end. Logs go to $OUT (default build-gpu/gpu-check).
#
# Usage: bash scripts/gpu_check.sh [--steps env,deps,configure,build,test,sm90,sass,bench,memcheck,racecheck,
#                                           memcheck_model,racecheck_model,portable]
#        bash scripts/gpu_check.sh --pack-deps DIR    (on a Debian build machine: copy the apt headers/libs into DIR/usr)
# Env: OUT, BUILD_DIR (build-gpu), JOBS (16), BUDGET_S (560: steps are time-boxed so the summary always prints),
#      BENCH_ARGS (extra `moex bench` arguments for both passes, e.g. "--shapes qwen3-30b-a3b"),
#      MOEX_DEPS (prefix holding usr/include, default .deps).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

if [[ "${1:-}" == "--pack-deps" ]]; then  # run on the build machine, then carry DIR (e.g. .deps) to the GPU machine
    dst=${2:?usage: --pack-deps DIR}
    mkdir -p "$dst/usr/include" "$dst/usr/lib/x86_64-linux-gnu/cmake" "$dst/usr/share/cmake" "$dst/usr/src"
    cp -a /usr/include/pcre2.h /usr/include/utf8proc.h "$dst/usr/include/"
    for d in nlohmann fmt CLI gtest gmock; do [[ -d /usr/include/$d ]] && cp -a /usr/include/$d "$dst/usr/include/"; done
    for f in /usr/lib/x86_64-linux-gnu/libfmt.so* /usr/lib/x86_64-linux-gnu/libpcre2-8.so* /usr/lib/x86_64-linux-gnu/libutf8proc.so* /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a; do
        [[ -e $f ]] && cp -a "$f" "$dst/usr/lib/x86_64-linux-gnu/"
    done
    for d in fmt GTest; do [[ -d /usr/lib/x86_64-linux-gnu/cmake/$d ]] && cp -a /usr/lib/x86_64-linux-gnu/cmake/$d "$dst/usr/lib/x86_64-linux-gnu/cmake/"; done
    for d in nlohmann_json CLI11; do [[ -d /usr/share/cmake/$d ]] && cp -a /usr/share/cmake/$d "$dst/usr/share/cmake/"; done
    [[ -d /usr/src/googletest ]] && cp -a /usr/src/googletest "$dst/usr/src/"
    echo "packed into $dst ($(du -sh "$dst" | cut -f1)); carry it as .deps"
    exit 0
fi

STEPS="env,deps,configure,build,test,sm90,sass,bench,memcheck,racecheck,memcheck_model,racecheck_model,portable"
if [[ "${1:-}" == "--steps" ]]; then STEPS=${2:?}; fi
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
OUT=${OUT:-$BUILD/gpu-check}
JOBS=${JOBS:-16}
BUDGET_S=${BUDGET_S:-560}
DEPS=${MOEX_DEPS:-$ROOT/.deps}
START=$(date +%s)
mkdir -p "$BUILD" "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

want() { [[ ",$STEPS," == *",$1,"* ]]; }
left() { echo $((BUDGET_S - ($(date +%s) - START))); }
record() {  # step status detail
    printf '%-11s %-8s %s\n' "$1" "$2" "$3" | tee -a "$SUMMARY"
}
# Runs a time-boxed command: box STEP MAX_SECONDS LOG cmd...; returns the command's status (124 = timed out).
box() {
    local step=$1 max=$2 log=$3; shift 3
    local l; l=$(left)
    if (( l < 15 )); then record "$step" SKIP "time budget spent (BUDGET_S=$BUDGET_S)"; return 125; fi
    (( max > l - 5 )) && max=$((l - 5))
    echo "== $step (<= ${max}s): $*" >>"$log"
    timeout --kill-after=5 "$max" "$@" >>"$log" 2>&1
}
gtest_counts() {  # log -> "P passed, F failed, S skipped"
    local log=$1 p f s
    p=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+$'); p=${p:-0}
    f=$(grep -Eo '^\[  FAILED  \] [0-9]+ test' "$log" | tail -1 | grep -Eo '^\[  FAILED  \] [0-9]+' | grep -Eo '[0-9]+$'); f=${f:-0}
    s=$(grep -Eo '^\[  SKIPPED \] [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+$'); s=${s:-0}
    echo "$p passed, $f failed, $s skipped"
}
finish() {  # the step table last: it is what the tail of the output must show
    echo
    if [[ -s "$OUT/sass_summary.txt" ]]; then
        echo "---------------- SASS census (kernels with tensor-core or TMA instructions) ----------------"
        cut -c1-140 "$OUT/sass_summary.txt"
    fi
    if [[ -s "$OUT/bench.txt" ]]; then
        echo "---------------- moex bench --device cuda (bf16; json lines in $OUT/bench*.jsonl) ----------------"
        cat "$OUT/bench.txt"
    fi
    echo "================ moex gpu_check summary ($(( $(date +%s) - START ))s; logs in $OUT) ================"
    printf '%-11s %-8s %s\n' step status detail
    cat "$SUMMARY"
}
trap finish EXIT

TESTS_BIN="$BUILD/tests/moex_tests"
CLI_BIN="$BUILD/moex"

[[ -d /usr/local/cuda/bin ]] && export PATH="/usr/local/cuda/bin:$PATH"
FAILED=0
fail_step() { FAILED=1; record "$1" FAIL "$2"; }

# ---- env -----------------------------------------------------------------------------------------------------------
if want env; then
    { date; uname -a; nvidia-smi; nvcc --version; cmake --version; ninja --version; g++ --version; } >"$OUT/env.txt" 2>&1
    gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
    record env OK "${gpu:-nvidia-smi missing}; nvcc $(nvcc --version 2>/dev/null | grep -Eo 'release [0-9.]+' | cut -d' ' -f2); cmake $(cmake --version 2>/dev/null | head -1 | awk '{print $3}')"
fi

# ---- deps: nlohmann-json, fmt, CLI11 (headers + cmake configs), GoogleTest (built from .deps sources if needed) ----
PREFIXES=()
[[ -d "$DEPS/usr/include" ]] && PREFIXES+=("$DEPS/usr")
[[ -d "$DEPS/include" ]] && PREFIXES+=("$DEPS")
[[ -d "$BUILD/gtest-prefix/include" ]] && PREFIXES+=("$BUILD/gtest-prefix")
has_header() {
    local d
    for d in /usr/include /usr/local/include "${PREFIXES[@]/%//include}"; do [[ -e "$d/$1" ]] && return 0; done
    return 1
}
TESTS=ON
if want deps || want configure; then
    if ! has_header gtest/gtest.h && [[ -f "$DEPS/usr/src/googletest/CMakeLists.txt" ]]; then
        box deps 150 "$OUT/gtest_build.log" bash -c "cmake -S '$DEPS/usr/src/googletest' -B '$BUILD/gtest-build' -G Ninja \
            -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DCMAKE_INSTALL_PREFIX='$BUILD/gtest-prefix' && \
            ninja -C '$BUILD/gtest-build' -j $JOBS install"
        [[ -d "$BUILD/gtest-prefix/include" ]] && PREFIXES+=("$BUILD/gtest-prefix")
    fi
    missing=()
    for h in nlohmann/json.hpp fmt/format.h CLI/CLI.hpp pcre2.h utf8proc.h gtest/gtest.h; do has_header "$h" || missing+=("$h"); done
    if ((${#missing[@]})); then
        [[ " ${missing[*]} " == *" gtest/gtest.h "* ]] && TESTS=OFF
        fail_step deps "missing ${missing[*]}: on the build machine run 'bash scripts/gpu_check.sh --pack-deps .deps' and carry .deps"
    else
        record deps OK "headers found (prefixes: ${PREFIXES[*]:-system})"
    fi
fi

# ---- configure ---------------------------------------------------------------------------------------------------
if want configure; then
    args=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOEX_CUDA=ON "-DMOEX_TESTS=$TESTS"
          # CMake < 3.26 knows no CUDA20 flag for nvcc; harmless on newer CMake (its own setting wins).
          -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20)
    command -v nvcc >/dev/null && args+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
    if ((${#PREFIXES[@]})); then
        args+=("-DCMAKE_PREFIX_PATH=$(IFS=';'; echo "${PREFIXES[*]}")")
        for p in "${PREFIXES[@]}"; do
            for pair in fmt:lib/x86_64-linux-gnu/cmake/fmt nlohmann_json:share/cmake/nlohmann_json CLI11:share/cmake/CLI11 \
                        GTest:lib/x86_64-linux-gnu/cmake/GTest GTest:lib/cmake/GTest GTest:lib64/cmake/GTest; do
                [[ -d "$p/${pair#*:}" ]] && args+=("-D${pair%%:*}_DIR=$p/${pair#*:}")
            done
        done
    fi
    box configure 180 "$OUT/configure.log" cmake "${args[@]}"
    rc=$?
    if ((rc == 0)); then
        record configure OK "Release, MOEX_TESTS=$TESTS"
    elif ((rc != 125)); then
        fail_step configure "$(grep -m3 -E 'Error|error|Could not find' "$OUT/configure.log" | tr '\n' ' ' | cut -c1-300)"
    fi
fi

# ---- build -------------------------------------------------------------------------------------------------------
if want build; then
    box build 420 "$OUT/build.log" ninja -C "$BUILD" -j "$JOBS" -k 0
    rc=$?
    if ((rc == 0)); then
        record build OK "$(grep -c 'Building' "$OUT/build.log") objects; warnings: $(grep -c 'warning' "$OUT/build.log")"
    elif ((rc != 125)); then
        fail_step build "$(grep -m4 -E 'error|FAILED' "$OUT/build.log" | tr '\n' ' ' | cut -c1-400)"
    fi
fi

# ---- CUDA tests: every backend x cuda vs the float64 reference, edge cases, determinism, graph capture ------------
if want test; then
    if [[ ! -x "$TESTS_BIN" ]]; then
        fail_step test "no $TESTS_BIN (MOEX_TESTS=$TESTS or build failed)"
    else
        box test 240 "$OUT/tests_cuda.log" "$TESTS_BIN" --gtest_filter='*cuda*:*Cuda*' --gtest_output="xml:$OUT/tests_cuda.xml"
        rc=$?
        counts=$(gtest_counts "$OUT/tests_cuda.log")
        if ((rc == 0)); then record test PASS "$counts"; elif ((rc != 125)); then
            fail_step test "rc=$rc; $counts; first: $(grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/tests_cuda.log" | head -3 | cut -c14- | tr '\n' ' ')"
        fi
    fi
fi

# ---- the sm_90a grouped GEMM's own check (tests/cuda/grouped_gemm_sm90_check.cu), when the build has it --------
if want sm90; then
    if [[ -x "$BUILD/grouped_gemm_sm90_check" ]]; then
        box sm90 150 "$OUT/sm90_check.log" "$BUILD/grouped_gemm_sm90_check" --check
        rc=$?
        if ((rc == 0)); then record sm90 PASS "$(tail -1 "$OUT/sm90_check.log" | cut -c1-200)"
        elif ((rc != 125)); then fail_step sm90 "rc=$rc; $(grep -m3 -iE 'fail|error' "$OUT/sm90_check.log" | tr '\n' ' ' | cut -c1-300)"; fi
    else
        record sm90 SKIP "no grouped_gemm_sm90_check in the build"
    fi
fi

# ---- SASS census: which kernels issue HGMMA (wgmma), UTMALDG (TMA loads), HMMA (mma.sync) ------------------------
if want sass; then
    if command -v cuobjdump >/dev/null && [[ -f "$BUILD/libmoex_cuda.a" ]]; then
        box sass 90 "$OUT/sass.log" bash -c "cuobjdump --dump-sass '$BUILD/libmoex_cuda.a' > '$OUT/sass.txt'"
        filt="cat"; command -v cu++filt >/dev/null && filt="cu++filt"
        awk '/Function :/ { if (n != "") print n, h, t, m; n = $3; h = 0; t = 0; m = 0 }
             /HGMMA/ { h++ } /UTMALDG/ { t++ } /HMMA/ { m++ }
             END { if (n != "") print n, h, t, m }' "$OUT/sass.txt" |
            awk '$2 + $3 + $4 > 0 { printf "HGMMA %5d  UTMALDG %4d  HMMA %5d  %s\n", $2, $3, $4, $1 }' |
            while read -r line; do
                name=${line##* }; echo "${line% *} $(echo "$name" | $filt | cut -c1-150)"
            done >"$OUT/sass_summary.txt"
        record sass OK "$(grep -c . "$OUT/sass_summary.txt") kernels use tensor cores/TMA; HGMMA in $(awk '$2 > 0' "$OUT/sass_summary.txt" | wc -l), UTMALDG in $(awk '$4 > 0' "$OUT/sass_summary.txt" | wc -l)"
    else
        record sass SKIP "no cuobjdump or no libmoex_cuda.a"
    fi
fi

# ---- moex bench --device cuda: full model sizes, bf16, batched_mm / grouped_mm, then the same under CUDA graphs ----
# About 40 s + 20 s on the H200 (weights made once per shape: 28 GB in all); boxed at 100 + 45 s.
if want bench; then
    if [[ -x "$CLI_BIN" ]]; then
        rm -f "$OUT"/bench.log "$OUT"/bench_graph.log "$OUT"/bench*.jsonl "$OUT"/bench.txt  # box appends to logs
        # shellcheck disable=SC2086  # BENCH_ARGS is a list of words (not --tokens: the graph pass sets its own)
        box bench 100 "$OUT/bench.log" "$CLI_BIN" bench --device cuda --json-file "$OUT/bench.jsonl" ${BENCH_ARGS:-}
        rc=$?
        rc_graph=125
        if ((rc != 125)); then
            # shellcheck disable=SC2086
            box bench 45 "$OUT/bench_graph.log" "$CLI_BIN" bench --device cuda --graph --tokens 1,8,64 \
                --json-file "$OUT/bench_graph.jsonl" ${BENCH_ARGS:-}
            rc_graph=$?
        fi
        {  # the rows, notes and errors (the full header and column legend stay in bench.log: the output tail is short)
            grep -vE '^(== |host:|floor terms:|columns:|  )' "$OUT/bench.log"
            [[ -f "$OUT/bench_graph.log" ]] && grep -E '^[^ ].*\+graph|^note|^moex: error' "$OUT/bench_graph.log"
        } >"$OUT/bench.txt"
        n=$(cat "$OUT"/bench*.jsonl 2>/dev/null | grep -c '"kind":"result"')
        bad=$(cat "$OUT"/bench*.jsonl 2>/dev/null | grep -cE '"(output_ok|check_ok)":false')
        detail="$n results ($bad with NaN or MISMATCH), table above"
        if ((rc == 0 && (rc_graph == 0 || rc_graph == 125))); then record bench OK "$detail"
        elif ((rc == 125)); then :
        else fail_step bench "rc=$rc, graph rc=$rc_graph (124: timed out); $detail; $(grep -h '^moex: error' "$OUT"/bench*.log | head -1 | cut -c1-160)"; fi
    else
        record bench SKIP "no $CLI_BIN"
    fi
fi

# ---- compute-sanitizer on a small sweep ----------------------------------------------------------------------------
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
sanitize() {  # step tool filter max_s
    local step=$1 tool=$2 filter=$3 max=$4
    if [[ ! -x "$TESTS_BIN" || ! -x "$SAN" ]]; then record "$step" SKIP "no tests binary or compute-sanitizer"; return; fi
    box "$step" "$max" "$OUT/$step.log" "$SAN" --tool "$tool" --error-exitcode 86 --print-limit 20 \
        "$TESTS_BIN" --gtest_filter="$filter"
    local rc=$? errs
    ((rc == 125)) && return
    errs=$(grep -Eo 'ERROR SUMMARY: [0-9]+' "$OUT/$step.log" | tail -1 | grep -Eo '[0-9]+$')
    if ((rc == 0)); then record "$step" PASS "${errs:-0} sanitizer errors; $(gtest_counts "$OUT/$step.log")"
    else fail_step "$step" "rc=$rc; ${errs:-?} sanitizer errors; $(gtest_counts "$OUT/$step.log")"; fi
}
# Sweeps over moex's own CUDA backends (the other backends have their own checks): decode and odd sizes, sentinels,
# duplicates, the multi-kernel routing (LargeTokenCount), graph capture.
sweep() {  # backends... -> gtest filter
    local f="" b
    for b in "$@"; do
        f+="*BackendsMatchReference.Case/${b}_cuda_*_T1_*:*BackendsMatchReference.Case/${b}_cuda_*_T17_*:"
        f+="*EdgeCases.SentinelIdsContributeExactlyZero/${b}_cuda:*EdgeCases.DuplicateIdsCountTwice/${b}_cuda:"
        f+="*EdgeCases.OddSizes/${b}_cuda:*EdgeCases.LargeTokenCount/${b}_cuda:"
    done
    echo "${f}*CudaGraphReplay*T5_*:*CudaGraphReplay*T40_*"
}
if want memcheck; then sanitize memcheck memcheck "$(sweep eager batched_mm grouped_mm)" 170; fi
if want racecheck; then sanitize racecheck racecheck "$(sweep batched_mm grouped_mm)" 130; fi
# The model runtime's own kernels (cuda/model): every op, parity on two fixtures, the decode switch.
MODEL_FILTER="ModelOpsCuda*:*ModelParity*qwen3_moe_grouped_mm_cuda*:*ModelParity*olmoe_batched_mm_cuda*:ModelApi.*Cuda*"
if want memcheck_model; then sanitize memcheck_model memcheck "$MODEL_FILTER" 200; fi
if want racecheck_model; then sanitize racecheck_model racecheck "ModelOpsCuda*" 150; fi

# ---- the same CUDA tests of grouped_mm with the portable grouped GEMM forced (MOEX_GEMM=portable) -----------------
if want portable && [[ -x "$TESTS_BIN" ]]; then
    box portable 120 "$OUT/tests_portable.log" env MOEX_GEMM=portable "$TESTS_BIN" \
        --gtest_filter='*grouped_mm_cuda*:*CudaGraphReplay*grouped*:*deepgemm_cuda*'
    rc=$?
    if ((rc == 0)); then record portable PASS "$(gtest_counts "$OUT/tests_portable.log")"
    elif ((rc != 125)); then fail_step portable "rc=$rc; $(gtest_counts "$OUT/tests_portable.log")"; fi
fi

exit $FAILED
