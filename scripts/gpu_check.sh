#!/usr/bin/env bash
# GPU check of moex on an H200 in ONE call: configure + build (Release, ninja), CUDA tests (every backend x cuda vs the
# float64 reference, graph capture, the portable GEMM forced), SASS census (HGMMA / UTMALDG / HMMA per kernel), full-size
# quick benchmark + cross-check of the CUDA pipelines, `moex bench --device cuda`, compute-sanitizer memcheck and
# racecheck on a small sweep; a summary table at the end. Logs go to $OUT (default build-gpu/gpu-check).
#
# Usage: bash scripts/gpu_check.sh [--steps env,deps,configure,build,test,sm90,sass,quickbench,memcheck,racecheck,portable,bench]
#        bash scripts/gpu_check.sh --pack-deps DIR    (on a Debian build machine: copy the apt headers/libs into DIR/usr)
# Env: OUT, BUILD_DIR (build-gpu), JOBS (16), BUDGET_S (560: steps are time-boxed so the summary always prints),
#      QB_MODELS, QB_TOKENS (quickbench subsets), MOEX_DEPS (prefix holding usr/include, default .deps).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

if [[ "${1:-}" == "--pack-deps" ]]; then  # run on the build machine, then carry DIR (e.g. .deps) to the GPU machine
    dst=${2:?usage: --pack-deps DIR}
    mkdir -p "$dst/usr/include" "$dst/usr/lib/x86_64-linux-gnu/cmake" "$dst/usr/share/cmake" "$dst/usr/src"
    for d in nlohmann fmt CLI gtest gmock; do [[ -d /usr/include/$d ]] && cp -a /usr/include/$d "$dst/usr/include/"; done
    for f in /usr/lib/x86_64-linux-gnu/libfmt.so* /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a; do
        [[ -e $f ]] && cp -a "$f" "$dst/usr/lib/x86_64-linux-gnu/"
    done
    for d in fmt GTest; do [[ -d /usr/lib/x86_64-linux-gnu/cmake/$d ]] && cp -a /usr/lib/x86_64-linux-gnu/cmake/$d "$dst/usr/lib/x86_64-linux-gnu/cmake/"; done
    for d in nlohmann_json CLI11; do [[ -d /usr/share/cmake/$d ]] && cp -a /usr/share/cmake/$d "$dst/usr/share/cmake/"; done
    [[ -d /usr/src/googletest ]] && cp -a /usr/src/googletest "$dst/usr/src/"
    echo "packed into $dst ($(du -sh "$dst" | cut -f1)); carry it as .deps"
    exit 0
fi

STEPS="env,deps,configure,build,test,sm90,sass,quickbench,memcheck,racecheck,portable,bench"
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
    if [[ -s "$OUT/quickbench.txt" ]]; then
        echo "---------------- quickbench (bf16, us; x_floor = us / HBM-or-compute floor; vs_best = HF best / us) ----"
        cat "$OUT/quickbench.txt"
    fi
    echo "================ moex gpu_check summary ($(( $(date +%s) - START ))s; logs in $OUT) ================"
    printf '%-11s %-8s %s\n' step status detail
    cat "$SUMMARY"
}
trap finish EXIT

TESTS_BIN="$BUILD/tests/moex_tests"
CLI_BIN="$BUILD/moex"

# The quick benchmark source (built against libmoex_cuda.a; it is not part of the library).
write_quickbench() {
    cat >"$1" <<'QB_EOF'
// Full-size CUDA timing and cross-check of moex's eager / batched_mm / grouped_mm pipelines through cuda/launch.h,
// built by scripts/gpu_check.sh against libmoex_cuda.a (not part of the library). Rotating routing sets and an L2
// flush before each rep, CUDA events around one graph replay (eager: one direct call); floor and HF columns as in
// /work/shared/perf/baselines.md.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/launch.h"

namespace {

#define CK(x)                                                                                          \
    do {                                                                                               \
        cudaError_t e_ = (x);                                                                          \
        if (e_ != cudaSuccess) {                                                                       \
            std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); \
            std::exit(2);                                                                              \
        }                                                                                              \
    } while (0)

__global__ void fill_bf16(__nv_bfloat16* p, int64_t n, uint64_t seed, float scale) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        uint64_t z = seed * 0x9E3779B97F4A7C15ull + uint64_t(i);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        p[i] = __float2bfloat16(scale * (float(z >> 40) * (2.0f / 16777216.0f) - 1.0f));
    }
}

struct Model {
    const char* name;
    int64_t H, I, E, k;
    double hf_eager[6], hf_batched[6], hf_grouped[6];  // T = 1, 8, 64, 512, 4096, 16384 (0 = OOM / not run)
};
const int64_t kTok[6] = {1, 8, 64, 512, 4096, 16384};
const Model kModels[] = {
    {"qwen1.5-moe-a2.7b", 2048, 1408, 60, 4, {1934, 9758, 23331, 23106, 23012, 25590}, {212, 486, 2768, 21531, 0, 0},
     {204, 434, 681, 860, 1812, 4860}},
    {"qwen3-30b-a3b", 2048, 768, 128, 8, {3557, 19357, 45339, 30859, 29244, 31788}, {232, 566, 3099, 23523, 0, 0},
     {236, 375, 728, 746, 1143, 3128}},
    {"mixtral-8x7b", 4096, 14336, 8, 2, {730, 2240, 2520, 2701, 6774, 23020}, {598, 3785, 29718, 0, 0, 0},
     {452, 1194, 1345, 1887, 4976, 19003}},
    {"deepseek-v3", 7168, 2048, 256, 8, {3467, 22968, 56910, 59855, 110666, 75306}, {667, 4296, 31732, 0, 0, 0},
     {414, 1903, 6456, 7652, 9013, 22691}},
};

double hf_of(const double (&v)[6], int64_t T) {
    for (int i = 0; i < 6; ++i)
        if (kTok[i] == T) return v[i];
    return 0;
}

std::vector<std::string> split(const char* s) {
    std::vector<std::string> out;
    std::string cur;
    for (const char* p = s; *p; ++p) {
        if (*p == ',') out.push_back(cur), cur.clear();
        else cur += *p;
    }
    if (!cur.empty()) out.push_back(cur);
    return out;
}

float bf2f(uint16_t h) {
    uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> models, algos = {"batched_mm", "batched_nopdl", "grouped_mm", "eager"};
    std::vector<int64_t> tokens = {1, 8, 64, 512, 4096, 16384};
    int64_t eager_max_t = 512;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--models")) models = split(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--algos")) algos = split(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--tokens")) {
            tokens.clear();
            for (auto& t : split(argv[i + 1])) tokens.push_back(std::atoll(t.c_str()));
        } else if (!std::strcmp(argv[i], "--eager-max-t")) eager_max_t = std::atoll(argv[i + 1]);
    }
    std::string why;
    if (!moex::cuda::device_ready(&why)) {
        std::printf("device not ready: %s\n", why.c_str());
        return 1;
    }
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaEvent_t ev0, ev1;
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));
    void* flush = nullptr;
    const size_t flush_bytes = size_t(256) << 20;  // > 2x the 60 MB L2
    CK(cudaMalloc(&flush, flush_bytes));
    std::printf("%-18s %6s %-13s %10s %10s %7s %10s %10s %8s %s\n", "model", "T", "algo", "us", "floor_us", "x_floor",
                "hf_same", "hf_best", "vs_best", "check(max|d|/rms vs batched)");
    int failures = 0;
    for (const Model& m : kModels) {
        if (!models.empty() && std::find(models.begin(), models.end(), m.name) == models.end()) continue;
        const int64_t H = m.H, I = m.I, E = m.E, k = m.k, N = 2 * I;
        __nv_bfloat16 *wu, *wd;
        CK(cudaMalloc(&wu, size_t(E * N * H) * 2));
        CK(cudaMalloc(&wd, size_t(E * H * I) * 2));
        fill_bf16<<<4096, 256>>>(wu, E * N * H, 1, 1.0f / std::sqrt(float(H)));
        fill_bf16<<<4096, 256>>>(wd, E * H * I, 2, 1.0f / std::sqrt(float(I)));
        CK(cudaDeviceSynchronize());
        for (int64_t T : tokens) {
            const int kSets = 8;
            std::mt19937_64 rng(uint64_t(T) * 131 + uint64_t(E));
            std::vector<int32_t> ids(size_t(kSets * T * k));
            std::vector<float> w(ids.size());
            double touched = 0;
            std::vector<int> perm(static_cast<size_t>(E), 0);
            for (int s = 0; s < kSets; ++s) {
                std::vector<char> hit(static_cast<size_t>(E), 0);
                for (int64_t t = 0; t < T; ++t) {
                    for (int64_t e = 0; e < E; ++e) perm[size_t(e)] = int(e);
                    for (int64_t j = 0; j < k; ++j) {
                        std::swap(perm[size_t(j)], perm[size_t(j + int64_t(rng() % uint64_t(E - j)))]);
                        const size_t at = size_t((s * T + t) * k + j);
                        ids[at] = perm[size_t(j)];
                        w[at] = float(0.5 + 0.5 * double(rng() % 1000) / 1000.0) / float(k);
                        hit[size_t(perm[size_t(j)])] = 1;
                    }
                }
                for (char h : hit) touched += h;
            }
            touched /= kSets;
            const double bytes = 2.0 * 3.0 * double(H) * double(I) * touched + 4.0 * double(T) * double(H);
            const double flops = 6.0 * double(T) * double(k) * double(H) * double(I);
            const double floor_us = std::max(flops / 790e12, bytes / 4.3e12) * 1e6;

            __nv_bfloat16* x;
            int32_t *ids_all, *ids_cur;
            float *w_all, *w_cur;
            CK(cudaMalloc(&x, size_t(T * H) * 2));
            fill_bf16<<<1024, 256>>>(x, T * H, 3 + uint64_t(T), 1.0f);
            CK(cudaMalloc(&ids_all, ids.size() * 4));
            CK(cudaMalloc(&w_all, w.size() * 4));
            CK(cudaMalloc(&ids_cur, size_t(T * k) * 4));
            CK(cudaMalloc(&w_cur, size_t(T * k) * 4));
            CK(cudaMemcpy(ids_all, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(w_all, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
            CK(cudaDeviceSynchronize());  // legacy-stream setup must be done before work on the non-blocking stream
            std::vector<uint16_t> ref;  // batched_mm's output on set 0
            for (const std::string& algo : algos) {
                const moex::cuda::Algo a = algo == "eager"              ? moex::cuda::Algo::kEager
                                           : algo.rfind("batched", 0) == 0 ? moex::cuda::Algo::kBatched
                                                                           : moex::cuda::Algo::kGrouped;
                if (a == moex::cuda::Algo::kEager && T > eager_max_t) continue;
                const bool nopdl = algo == "batched_nopdl";  // the decode kernels without programmatic launch
                if (nopdl && T > 64) continue;
                if (nopdl) setenv("MOEX_PDL", "0", 1);
                __nv_bfloat16* out;
                CK(cudaMalloc(&out, size_t(T * H) * 2));
                moex::cuda::ExpertsArgs args{};
                args.x = x, args.ids = ids_cur, args.topk_weights = w_cur, args.w_up = wu, args.w_down = wd;
                args.out = out, args.T = T, args.H = H, args.I = I, args.E = E, args.k = k;
                args.dtype = moex::cuda::ActDType::kBF16, args.weights_f32 = true, args.has_gate = true;
                args.is_concatenated = true, args.activation = 0, args.gate_kind = 0;
                args.swiglu_alpha = 1.702f, args.swiglu_limit = 7.0f;
                auto set_routing = [&](int s) {
                    CK(cudaMemcpyAsync(ids_cur, ids_all + s * T * k, size_t(T * k) * 4, cudaMemcpyDeviceToDevice,
                                       stream));
                    CK(cudaMemcpyAsync(w_cur, w_all + s * T * k, size_t(T * k) * 4, cudaMemcpyDeviceToDevice, stream));
                };
                cudaGraphExec_t exec = nullptr;
                cudaGraph_t graph = nullptr;
                double med = -1, hot = -1;
                std::string err;
                try {
                    set_routing(0);
                    moex::cuda::run_experts(args, a, stream);  // warm-up (pools, attributes)
                    CK(cudaStreamSynchronize(stream));
                    if (a != moex::cuda::Algo::kEager) {
                        CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
                        moex::cuda::run_experts(args, a, stream);
                        CK(cudaStreamEndCapture(stream, &graph));
                        CK(cudaGraphInstantiate(&exec, graph, 0));
                    }
                    const int reps = T <= 64 ? 15 : (T <= 512 ? 7 : 3);
                    std::vector<float> ms;
                    for (int r = 0; r < reps + 1; ++r) {
                        set_routing(r % kSets);
                        CK(cudaMemsetAsync(flush, r & 0xff, flush_bytes, stream));
                        CK(cudaEventRecord(ev0, stream));
                        if (exec) CK(cudaGraphLaunch(exec, stream));
                        else moex::cuda::run_experts(args, a, stream);
                        CK(cudaEventRecord(ev1, stream));
                        CK(cudaEventSynchronize(ev1));
                        float t_ms = 0;
                        CK(cudaEventElapsedTime(&t_ms, ev0, ev1));
                        if (r > 0) ms.push_back(t_ms);  // first rep: graph upload
                    }
                    std::sort(ms.begin(), ms.end());
                    med = double(ms[ms.size() / 2]) * 1000.0;
                    if (exec) {  // same routing, warm L2: what a tight decode loop would see at best
                        struct Ctx { cudaGraphExec_t e; } ctx{exec};
                        hot = moex::cuda::time_us(
                            [](void* c, void* s) {
                                CK(cudaGraphLaunch(static_cast<Ctx*>(c)->e, static_cast<cudaStream_t>(s)));
                            },
                            &ctx, stream, 2, 10, false);
                    }
                    set_routing(0);
                    moex::cuda::run_experts(args, a, stream);
                    CK(cudaStreamSynchronize(stream));
                } catch (const std::exception& e) {
                    err = e.what();
                    (void)cudaGetLastError();
                }
                if (exec) cudaGraphExecDestroy(exec);
                if (graph) cudaGraphDestroy(graph);
                if (nopdl) unsetenv("MOEX_PDL");
                std::string check = "-";
                if (err.empty()) {
                    std::vector<uint16_t> got(size_t(T * H));
                    CK(cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost));
                    bool finite = true;
                    for (uint16_t v : got) finite = finite && std::isfinite(bf2f(v));
                    if (ref.empty()) {
                        ref = got;
                        check = finite ? "(reference)" : "NON-FINITE";
                    } else {
                        double rms = 0, md = 0;
                        for (size_t i = 0; i < got.size(); ++i) {
                            const double r = bf2f(ref[i]), g = bf2f(got[i]);
                            rms += r * r;
                            md = std::max(md, std::fabs(g - r));
                        }
                        rms = std::sqrt(rms / double(got.size()));
                        const double rel = md / (rms + 1e-30);
                        char buf[64];
                        std::snprintf(buf, sizeof buf, "%.2e%s", rel, rel > 0.1 || !finite ? " MISMATCH" : "");
                        check = buf;
                        if (rel > 0.1 || !finite) ++failures;  // bf16 output ulps stay well below 0.1 rms
                    }
                } else {
                    ++failures;
                    check = "ERROR: " + err;
                }
                const double hf_same = a == moex::cuda::Algo::kEager     ? hf_of(m.hf_eager, T)
                                       : a == moex::cuda::Algo::kBatched ? hf_of(m.hf_batched, T)
                                                                         : hf_of(m.hf_grouped, T);
                double hf_best = 0;
                for (const double h : {hf_of(m.hf_eager, T), hf_of(m.hf_batched, T), hf_of(m.hf_grouped, T)})
                    if (h > 0 && (hf_best == 0 || h < hf_best)) hf_best = h;
                std::printf("%-18s %6lld %-13s %10.1f %10.1f %7.2f %10.0f %10.0f %8.2f %s", m.name, (long long)T,
                            algo.c_str(), med, floor_us, med > 0 ? med / floor_us : 0.0, hf_same, hf_best,
                            med > 0 && hf_best > 0 ? hf_best / med : 0.0, check.c_str());
                if (hot > 0) std::printf("  [hot L2: %.1f us]", hot);
                std::printf("\n");
                std::fflush(stdout);
                CK(cudaFree(out));
            }
            CK(cudaFree(x));
            CK(cudaFree(ids_all));
            CK(cudaFree(w_all));
            CK(cudaFree(ids_cur));
            CK(cudaFree(w_cur));
        }
        CK(cudaFree(wu));
        CK(cudaFree(wd));
    }
    std::printf("quickbench: %d failure(s); x_floor = us / floor; vs_best = HF best / us (> 1: faster than HF)\n",
                failures);
    return failures == 0 ? 0 : 1;
}
QB_EOF
}

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
    for h in nlohmann/json.hpp fmt/format.h CLI/CLI.hpp gtest/gtest.h; do has_header "$h" || missing+=("$h"); done
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

# ---- quickbench: full model sizes, bf16, batched_mm / grouped_mm / eager, cross-checked against each other -------
if want quickbench; then
    qb="$BUILD/moex_cuda_quickbench"
    write_quickbench "$BUILD/gpu_quickbench.cu"
    rc=1
    [[ -f "$BUILD/libmoex_cuda.a" ]] && { box quickbench 120 "$OUT/quickbench_build.log" nvcc -std=c++20 -O2 \
        -gencode=arch=compute_90a,code=sm_90a -I"$ROOT" -I"$ROOT/include" "$BUILD/gpu_quickbench.cu" \
        "$BUILD/libmoex_cuda.a" -lcublas -lcuda -o "$qb"; rc=$?; }
    if ((rc == 0)); then
        box quickbench 300 "$OUT/quickbench.log" "$qb" --models "${QB_MODELS:-qwen1.5-moe-a2.7b,qwen3-30b-a3b,mixtral-8x7b,deepseek-v3}" \
            --tokens "${QB_TOKENS:-1,8,64,512,4096,16384}" --eager-max-t 64
        rc=$?
        grep -v '^== ' "$OUT/quickbench.log" >"$OUT/quickbench.txt"
        last=$(tail -1 "$OUT/quickbench.txt")
        if ((rc == 0)); then record quickbench OK "$last"; elif ((rc != 125)); then fail_step quickbench "rc=$rc; $last"; fi
    elif ((rc != 125)); then
        fail_step quickbench "could not build (no libmoex_cuda.a, or see quickbench_build.log)"
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

# ---- the same CUDA tests of grouped_mm with the portable grouped GEMM forced (MOEX_GEMM=portable) -----------------
if want portable && [[ -x "$TESTS_BIN" ]]; then
    box portable 120 "$OUT/tests_portable.log" env MOEX_GEMM=portable "$TESTS_BIN" \
        --gtest_filter='*grouped_mm_cuda*:*CudaGraphReplay*grouped*:*deepgemm_cuda*'
    rc=$?
    if ((rc == 0)); then record portable PASS "$(gtest_counts "$OUT/tests_portable.log")"
    elif ((rc != 125)); then fail_step portable "rc=$rc; $(gtest_counts "$OUT/tests_portable.log")"; fi
fi

# ---- moex bench --device cuda (the bench driver) -------------------------------------------------------------------
if want bench; then
    if [[ -x "$CLI_BIN" ]]; then
        box bench 150 "$OUT/bench.log" "$CLI_BIN" bench --device cuda --dtype bf16 --tokens 1,8,64,512,4096
        rc=$?
        if ((rc == 0)); then record bench OK "see $OUT/bench.log"
        elif ((rc == 125)); then :
        elif grep -qiE 'cpu only|times the CPU|--device cpu' "$OUT/bench.log"; then
            record bench TODO ">>> 'moex bench --device cuda' is not implemented yet in bench/ (CPU only); the quickbench above times CUDA <<<"
        else fail_step bench "rc=$rc; $(tail -2 "$OUT/bench.log" | tr '\n' ' ' | cut -c1-200)"; fi
    else
        record bench SKIP "no $CLI_BIN"
    fi
fi

exit $FAILED
