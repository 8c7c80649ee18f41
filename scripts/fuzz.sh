#!/usr/bin/env bash
# The libFuzzer targets (fuzz/): configures a clang build in build-fuzz/ (FUZZ_BUILD_DIR), builds the five targets
# and runs each for SECONDS (default 20; CI: 5 x 20 s) over its seed corpus fuzz/corpus/<reader>, which stays as it
# is (new inputs go to a scratch folder). A crash, sanitizer report, 10 s timeout or 4 GB of memory fails the run and
# leaves the input in build-fuzz/artifacts/ (replay: build-fuzz/fuzz/fuzz_<reader> FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
build=${FUZZ_BUILD_DIR:-build-fuzz}
if ! command -v clang++ >/dev/null; then
    echo "fuzz: clang++ not found (scripts/install-deps.sh installs clang and libFuzzer)" >&2
    exit 1
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -G Ninja -B "$build" -S . -DCMAKE_BUILD_TYPE=Release -DMOEX_CUDA=OFF -DMOEX_FUZZ=ON -DMOEX_TESTS=OFF \
    -DMOEX_PYTHON=OFF -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang "${launcher[@]}" >/dev/null
targets=(fuzz_safetensors fuzz_problem_file fuzz_config fuzz_shard_index fuzz_tokenizer)
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${targets[@]}"
mkdir -p "$build/artifacts"
for target in "${targets[@]}"; do
    reader=${target#fuzz_}
    dict=fuzz/json.dict
    [[ $reader == safetensors || $reader == problem_file ]] && dict=fuzz/safetensors.dict
    scratch=$(mktemp -d)
    log="$build/artifacts/$target.log"
    if ! "$build/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
        -dict="$dict" -artifact_prefix="$build/artifacts/$target-" "$scratch" "fuzz/corpus/$reader" >"$log" 2>&1; then
        rm -rf "$scratch"
        tail -n 40 "$log"
        echo "fuzz: $target found a failure (input in $build/artifacts/, log $log)" >&2
        exit 1
    fi
    rm -rf "$scratch"
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz: $target ${runs:-?} inputs in ${seconds} s, no failure"
done
