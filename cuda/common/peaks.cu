// measure_device_peaks (peaks.h): each ceiling timed with CUDA events, best of a few repetitions after a warm-up.
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <functional>

#include "cuda/common/check.h"
#include "cuda/common/cublas.h"
#include "cuda/common/device.h"
#include "cuda/common/peaks.h"

namespace moex::cuda {
namespace {

// Every 16-byte word read once; the XOR of what a thread read is stored only if it matches a value the zeroed
// buffer cannot hold, so the loads stay and nothing is written.
__global__ void read_kernel(const uint4* p, size_t n, uint32_t* sink) {
    uint32_t x = 0;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        const uint4 v = __ldcs(p + i);
        x ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (x == 0x9e3779b9u) *sink = x;
}

struct Event {
    cudaEvent_t e = nullptr;
    Event() { CUDA_CHECK(cudaEventCreate(&e)); }
    ~Event() { (void)cudaEventDestroy(e); }
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
};

// Best time of `fn` in ms over `reps` after one warm-up call.
double best_ms(const std::function<void()>& fn, int reps) {
    const Event a, b;
    fn();
    float best = 1e30f;
    for (int r = 0; r < reps; ++r) {
        CUDA_CHECK(cudaEventRecord(a.e));
        fn();
        CUDA_CHECK(cudaEventRecord(b.e));
        CUDA_CHECK(cudaEventSynchronize(b.e));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a.e, b.e));
        best = std::min(best, ms);
    }
    return double(best);
}

// Zero-filled device memory. The GEMMs run on zeros, which draws less power than real data and so, if anything,
// times them faster: a floor from them errs low, never below a real call.
struct Buffer {
    void* p = nullptr;
    explicit Buffer(size_t bytes) {
        CUDA_CHECK(cudaMalloc(&p, bytes));
        const cudaError_t err = cudaMemset(p, 0, bytes);
        if (err != cudaSuccess) {
            (void)cudaFree(p);
            p = nullptr;
            CUDA_CHECK(err);
        }
    }
    ~Buffer() { (void)cudaFree(p); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
};

// cuBLASLt e4m3 "TN" GEMM (the layout its FP8 kernels take): D (n, n) bf16 = Aᵀ · B, A and B (n, n) e4m3.
double fp8_gemm_ms(int n, std::string& why) {
    const size_t nn = size_t(n) * size_t(n), ws_bytes = size_t(32) << 20;
    Buffer a(nn), b(nn), d(nn * 2), ws(ws_bytes);
    cublasLtHandle_t h = nullptr;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    double ms = 0;
    try {
        CUBLAS_CHECK(cublasLtCreate(&h));
        CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, uint64_t(n), uint64_t(n), n));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, uint64_t(n), uint64_t(n), n));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, uint64_t(n), uint64_t(n), n));
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        const uint64_t wsb = ws_bytes;
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
        cublasLtMatmulHeuristicResult_t res{};
        int found = 0;
        const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &res, &found);
        if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
            why = std::string("cuBLASLt has no e4m3 algorithm here: ") + cublasLtGetStatusString(st);
        } else {
            const float one = 1.0f, zero = 0.0f;
            ms = best_ms(
                [&] {
                    CUBLAS_CHECK(cublasLtMatmul(h, desc, &one, a.p, la, b.p, lb, &zero, d.p, ld, d.p, ld, &res.algo,
                                                ws.p, ws_bytes, nullptr));
                },
                10);
        }
    } catch (const Error& e) {
        why = e.what();
        ms = 0;
    }
    if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
    if (ld) (void)cublasLtMatrixLayoutDestroy(ld);
    if (lb) (void)cublasLtMatrixLayoutDestroy(lb);
    if (la) (void)cublasLtMatrixLayoutDestroy(la);
    if (desc) (void)cublasLtMatmulDescDestroy(desc);
    if (h) (void)cublasLtDestroy(h);
    return ms;
}

}  // namespace

DevicePeaks measure_device_peaks(size_t bytes, int gemm_n) {
    MOEX_REQUIRE(bytes >= (size_t(1) << 20) && gemm_n >= 256 && gemm_n % 256 == 0, ErrorCode::kInvalidArgument,
                 "measure_device_peaks: a buffer of at least 1 MiB and a GEMM size that is a multiple of 256");
    DevicePeaks pk;
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, current_device()));
    pk.device = prop.name;
    pk.gemm_n = gemm_n;
    bytes &= ~size_t(15);
    {
        Buffer src(bytes), dst(bytes), sink(4);
        const int blocks = device_state().sm_count * 8;
        const double read_ms = best_ms(
            [&] {
                read_kernel<<<blocks, 512>>>(static_cast<const uint4*>(src.p), bytes / 16,
                                             static_cast<uint32_t*>(sink.p));
                MOEX_LAUNCH_CHECK();
            },
            5);
        pk.read_gbps = double(bytes) / (read_ms * 1e6);
        const double copy_ms =
            best_ms([&] { CUDA_CHECK(cudaMemcpyAsync(dst.p, src.p, bytes, cudaMemcpyDeviceToDevice)); }, 5);
        pk.copy_gbps = 2.0 * double(bytes) / (copy_ms * 1e6);
    }
    const double flop = 2.0 * double(gemm_n) * gemm_n * gemm_n;
    {
        const size_t nn = size_t(gemm_n) * size_t(gemm_n);
        Buffer a(nn * 2), b(nn * 2), c(nn * 2);
        const float one = 1.0f, zero = 0.0f;
        const double ms = best_ms(
            [&] {
                CUBLAS_CHECK(cublasGemmEx(cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, gemm_n, gemm_n, gemm_n, &one, a.p,
                                          CUDA_R_16BF, gemm_n, b.p, CUDA_R_16BF, gemm_n, &zero, c.p, CUDA_R_16BF,
                                          gemm_n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            },
            10);
        pk.bf16_gflops = flop / (ms * 1e6);
    }
    const double fp8_ms = fp8_gemm_ms(gemm_n, pk.fp8_why);
    pk.fp8_gflops = fp8_ms > 0 ? flop / (fp8_ms * 1e6) : 0;
    return pk;
}

}  // namespace moex::cuda
