// Standalone GPU check and benchmark of the sm_90a weight-gradient GEMM (cuda/gemm/weight_grad.h): every output of
// every case against a float64 GPU reference (C poisoned first, so an unwritten element fails), then TFLOP/s on the
// backward's shapes beside cuBLAS's strided-batched bf16 GEMM of the same per-expert products (uniform row counts).
// Usage: weight_grad_sm90_check [--check] [--bench]   (default: both; exit code 1 on any failure)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "cuda/gemm/grouped_gemm.h"  // kRowAlign
#include "cuda/gemm/weight_grad.h"
#include "tests/cuda/check_support.cuh"

using namespace moex::cuda;
using namespace moex::test::gpu;
using moex::DType;

namespace {

// Row r of a (P, L) operand: uniform values for the expert's rows, zero for padding rows (the contract).
template <typename T>
__global__ void fill_rows_kernel(T* p, int64_t P, int64_t L, const int32_t* row_real, uint64_t seed) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < P * L; i += int64_t(gridDim.x) * blockDim.x)
        p[i] = static_cast<T>(row_real[i / L] ? 2.0f * hash_uniform(seed, i) - 1.0f : 0.0f);  // [-1, 1)
}

// One thread per output (e, m, n): the float64 sum over the expert's rows.
template <typename T>
__global__ void reference_kernel(const T* A, const T* B, const int32_t* start, const int32_t* count, int64_t E,
                                 int64_t M, int64_t N, double* out) {
    const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (i >= E * M * N) return;
    const int64_t e = i / (M * N), m = (i / N) % M, n = i % N;
    double s = 0;
    for (int64_t r = start[e]; r < start[e] + count[e]; ++r)
        s += double(static_cast<float>(A[r * M + m])) * double(static_cast<float>(B[r * N + n]));
    out[i] = s;
}

struct Layout {
    std::vector<int32_t> count, start, real;  // real: (P,) 1 for an expert's row, 0 for padding
    int64_t P = 0;
};
Layout layout_of(const std::vector<int32_t>& counts) {
    Layout l;
    l.count = counts;
    l.start.assign(counts.size() + 1, 0);
    for (size_t e = 0; e < counts.size(); ++e)
        l.start[e + 1] = l.start[e] + (counts[e] + kRowAlign - 1) / kRowAlign * kRowAlign;
    l.P = std::max<int64_t>(kRowAlign, l.start.back());
    l.real.assign(size_t(l.P), 0);
    for (size_t e = 0; e < counts.size(); ++e)
        for (int32_t r = 0; r < counts[e]; ++r) l.real[size_t(l.start[e] + r)] = 1;
    return l;
}

template <typename T>
struct Problem {
    Layout lay;
    int64_t E, M, N;
    DevBuf A, B, C, d_start, d_count, d_real;
    Problem(const std::vector<int32_t>& counts, int64_t M_, int64_t N_, uint64_t seed)
        : lay(layout_of(counts)),
          E(int64_t(counts.size())),
          M(M_),
          N(N_),
          A(size_t(lay.P * M_) * 2),
          B(size_t(lay.P * N_) * 2),
          C(size_t(int64_t(counts.size()) * M_ * N_) * 2),
          d_start(4 * (counts.size() + 1)),
          d_count(4 * counts.size()),
          d_real(4 * size_t(lay.P)) {
        CK(cudaMemcpy(d_start.p, lay.start.data(), 4 * lay.start.size(), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_count.p, lay.count.data(), 4 * lay.count.size(), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_real.p, lay.real.data(), 4 * lay.real.size(), cudaMemcpyHostToDevice));
        fill_rows_kernel<<<1024, 256>>>(A.as<T>(), lay.P, M, d_real.as<int32_t>(), seed);
        fill_rows_kernel<<<1024, 256>>>(B.as<T>(), lay.P, N, d_real.as<int32_t>(), seed + 1);
        CK(cudaGetLastError());
    }
    WeightGradGemmArgs args() const {
        return {A.p,
                B.p,
                C.p,
                d_start.as<int32_t>(),
                d_count.as<int32_t>(),
                lay.P,
                M,
                N,
                E,
                std::is_same_v<T, __nv_bfloat16> ? DType::kBF16 : DType::kF16};
    }
};

int g_fail = 0, g_pass = 0;

template <typename T>
void check_case(const char* name, const std::vector<int32_t>& counts, int64_t M, int64_t N, uint64_t seed) {
    constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
    Problem<T> p(counts, M, N, seed);
    CK(cudaMemset(p.C.p, 0xFF, size_t(p.E * M * N) * 2));  // poison: NaN
    try {
        launch_weight_grad_sm90(p.args(), nullptr);
        CK(cudaDeviceSynchronize());
    } catch (const std::exception& ex) {
        std::printf("FAIL %s: %s\n", name, ex.what());
        ++g_fail;
        return;
    }
    const int64_t n = p.E * M * N;
    DevBuf ref(size_t(n) * 8);
    reference_kernel<T><<<unsigned((n + 255) / 256), 256>>>(
        p.A.template as<T>(), p.B.template as<T>(), p.d_start.template as<int32_t>(), p.d_count.template as<int32_t>(),
        p.E, M, N, ref.as<double>());
    CK(cudaDeviceSynchronize());
    std::vector<double> want(static_cast<size_t>(n));
    std::vector<uint8_t> got(static_cast<size_t>(n) * 2);
    CK(cudaMemcpy(want.data(), ref.p, size_t(n) * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got.data(), p.C.p, got.size(), cudaMemcpyDeviceToHost));
    // Sums of up to a few hundred products of O(1) values: the f32 accumulation differs from float64 by ~1e-6
    // relative; the output's rounding is half an ulp of the dtype (bf16 2^-9, f16 2^-12) of |want|.
    const double rtol = kBf16 ? 8e-3 : 2e-3, atol = 1e-3;
    int64_t bad = 0;
    double max_err = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double g = host_to_float(got.data(), size_t(i), kBf16 ? 0 : 1), w = want[size_t(i)],
                     err = std::fabs(g - w);
        if (!(err <= atol + rtol * std::fabs(w))) {
            if (bad < 3)
                std::printf("    mismatch e %lld m %lld n %lld: got %.6g want %.6g\n", (long long)(i / (M * N)),
                            (long long)(i / N % M), (long long)(i % N), g, w);
            ++bad;
        }
        if (std::isfinite(err)) max_err = std::max(max_err, err);
    }
    std::printf("%s %s %s M %lld N %lld E %lld: max_err %.3g bad %lld\n", bad ? "FAIL" : "ok  ", name,
                kBf16 ? "bf16" : "f16", (long long)M, (long long)N, (long long)p.E, max_err, (long long)bad);
    (bad ? g_fail : g_pass)++;
}

void run_checks() {
    const std::vector<int32_t> mixed = {0, 1, 63, 64, 65, 127, 128, 300, 0, 700};
    for (int t = 0; t < 2; ++t) {
        auto run = [&](const char* name, const std::vector<int32_t>& c, int64_t M, int64_t N, uint64_t seed) {
            if (t == 0)
                check_case<__nv_bfloat16>(name, c, M, N, seed);
            else
                check_case<__half>(name, c, M, N, seed);
        };
        run("one tile", {128, 200}, 128, 256, 1);
        run("tails", mixed, 72, 136, 2);  // partial M and N tiles, a second warpgroup with 8 rows
        run("many tiles", mixed, 392, 520, 3);
        run("all empty", {0, 0, 0}, 64, 64, 4);
        run("M 8 N 8", {5, 130}, 8, 8, 5);
        run("N under 128", mixed, 256, 72, 6);        // the backward's dWd at I = 72
        run("M 136 N 72", mixed, 136, 72, 7);         // a CTA pair whose second tile has 8 rows: one warpgroup idle
        run("pairs, 3 B boxes", mixed, 256, 136, 8);  // CTA pairs: one loads B boxes 0 and 2, the other box 1
    }
}

// ---- benchmark ------------------------------------------------------------------------------------------------
double time_ms(const std::function<void()>& f, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    f();
    CK(cudaDeviceSynchronize());
    CK(cudaEventRecord(a));
    for (int i = 0; i < reps; ++i) f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return ms / reps;
}

void run_bench() {
    struct Shape {
        const char* name;
        int64_t E, rows, M, N;
    };
    // Per expert `rows` rows (uniform routing at T = 16384): qwen3-30b-a3b (E 128, k 8: 1024), deepseek-v3 (E 256, k 8:
    // 512); up: dWu (2I, H) = dAᵀ X, down: dWd (H, I) = dOᵀ (w h).
    const Shape shapes[] = {{"qwen3-30b-a3b dWu", 128, 1024, 1536, 2048},
                            {"qwen3-30b-a3b dWd", 128, 1024, 2048, 768},
                            {"deepseek-v3 dWu", 256, 512, 4096, 7168},
                            {"deepseek-v3 dWd", 256, 512, 7168, 2048}};
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) std::exit(2);
    std::printf("%-20s %10s %10s %12s %10s\n", "shape", "moex ms", "TFLOP/s", "cuBLAS ms", "TFLOP/s");
    for (const Shape& s : shapes) {
        Problem<__nv_bfloat16> p(std::vector<int32_t>(size_t(s.E), int32_t(s.rows)), s.M, s.N, 7);
        const double flop = 2.0 * double(s.E) * s.rows * s.M * s.N;
        const double ms = time_ms([&] { launch_weight_grad_sm90(p.args(), nullptr); }, 10);
        // cuBLAS, column-major: C_eᵀ (N, M) = B_eᵀ (N, rows) · A_e (rows, M), batched over experts.
        const float one = 1.f, zero = 0.f;
        const double cb = time_ms(
            [&] {
                cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, int(s.N), int(s.M), int(s.rows), &one, p.B.p,
                                           CUDA_R_16BF, int(s.N), s.rows * s.N, p.A.p, CUDA_R_16BF, int(s.M),
                                           s.rows * s.M, &zero, p.C.p, CUDA_R_16BF, int(s.N), s.M * s.N, int(s.E),
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
            },
            10);
        std::printf("%-20s %10.3f %10.1f %12.3f %10.1f\n", s.name, ms, flop / ms * 1e-9, cb, flop / cb * 1e-9);
    }
    cublasDestroy(h);
}

}  // namespace

int main(int argc, char** argv) {
    bool check = argc == 1, bench = argc == 1;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--check") == 0) check = true;
        if (std::strcmp(argv[i], "--bench") == 0) bench = true;
    }
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("no CUDA device: skipped\n");
        return 0;
    }
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, 0));
    if (prop.major != 9 || prop.minor != 0) {
        std::printf("no CUDA device of compute capability 9.0 (sm_90a kernels): skipped\n");
        return 0;
    }
    if (check) run_checks();
    if (bench) run_bench();
    if (check) std::printf("weight_grad_sm90_check: %d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
