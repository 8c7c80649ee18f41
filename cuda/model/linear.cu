// linear: out (T, N) = x (T, K) · w (N, K)ᵀ + bias. Decode-sized T goes to the GEMV of gemv.cuh; the rest to
// cuBLASLt (f32 compute, bias fused as its epilogue), with one plan (descriptors + heuristic algorithm) cached per
// shape, stride, dtype and pointer alignment, so that a step after the first makes no heuristic query.
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <map>
#include <string>

#include "cuda/common/check.h"
#include "cuda/common/cublas.h"
#include "cuda/common/device.h"
#include "cuda/model/context.h"
#include "cuda/model/gemv.cuh"
#include "cuda/model/internal.h"

namespace moex::cuda::model {

namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLAS' recommendation for Hopper

// T, N, K, ld_x, ld_out, dtype, out_f32, bias, alignments of w, x, out.
using PlanKey = std::array<int64_t, 11>;

struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool fused_bias = false;
};

void destroy_plan(Plan& p) {
    if (p.a) (void)cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) (void)cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) (void)cublasLtMatrixLayoutDestroy(p.c);
    if (p.desc) (void)cublasLtMatmulDescDestroy(p.desc);
    p = Plan{};
}

int64_t alignment(const void* p) {
    const uintptr_t u = reinterpret_cast<uintptr_t>(p);
    int64_t a = 256;
    while (a > 2 && u % uint64_t(a) != 0) a /= 2;
    return a;
}

}  // namespace

struct LtState {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    std::map<PlanKey, Plan> plans;
};

LtState* lt_create(int device) {
    auto* s = new LtState();
    try {
        CUDA_CHECK(cudaSetDevice(device));
        CUBLAS_CHECK(cublasLtCreate(&s->handle));
        CUDA_CHECK(cudaMalloc(&s->workspace, kWorkspaceBytes));
    } catch (...) {
        lt_destroy(s);
        throw;
    }
    return s;
}

void lt_destroy(LtState* s) {
    if (s == nullptr) return;
    for (auto& [key, plan] : s->plans) destroy_plan(plan);
    if (s->workspace) (void)cudaFree(s->workspace);
    if (s->handle) (void)cublasLtDestroy(s->handle);
    delete s;
}

namespace {

// Column-major view for cuBLAS: out^T (N, T) = op_T(w stored (K, N)) · x^T stored (K, T).
// Returns false when no algorithm exists (the bias epilogue for this type combination, typically).
bool build_plan(LtState& s, const PlanKey& key, bool with_bias, Plan& p) {
    const int64_t T = key[0], N = key[1], K = key[2], ld_x = key[3], ld_out = key[4];
    const auto dt = static_cast<DType>(key[5]);
    const bool out_f32 = key[6] != 0;
    const cudaDataType_t in_t = cuda_data_type(dt), out_t = out_f32 ? CUDA_R_32F : in_t;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)));
    if (with_bias) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        const int32_t bias_t = int32_t(in_t);
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
        CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t, sizeof(bias_t)));
    }
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, in_t, uint64_t(K), uint64_t(N), K));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, in_t, uint64_t(K), uint64_t(T), ld_x));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, out_t, uint64_t(N), uint64_t(T), ld_out));
    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    const uint32_t al_w = uint32_t(key[8]), al_x = uint32_t(key[9]), al_o = uint32_t(key[10]);
    cublasStatus_t st =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_w, 4);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_x, 4);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_o, 4);
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_o, 4);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(s.handle, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
    (void)cublasLtMatmulPreferenceDestroy(pref);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
        p.algo = result.algo;
        p.fused_bias = with_bias;
        return true;
    }
    MOEX_REQUIRE(with_bias && (st == CUBLAS_STATUS_SUCCESS || st == CUBLAS_STATUS_NOT_SUPPORTED), ErrorCode::kCuda,
                 "linear: cuBLASLt has no algorithm for (" + std::to_string(T) + ", " + std::to_string(K) + ") x (" +
                     std::to_string(N) + ", " + std::to_string(K) + ")ᵀ: " + cublasLtGetStatusString(st));
    return false;
}

const Plan& get_plan(LtState& s, const PlanKey& key) {
    auto it = s.plans.find(key);
    if (it != s.plans.end()) return it->second;
    Plan p;
    try {
        if (!build_plan(s, key, key[7] != 0, p)) {  // no fused bias: a plain GEMM + bias_epilogue
            destroy_plan(p);
            if (!build_plan(s, key, false, p)) fail(ErrorCode::kCuda, "linear: cuBLASLt found no algorithm");
        }
    } catch (...) {
        destroy_plan(p);
        throw;
    }
    return s.plans.emplace(key, p).first->second;
}

PlanKey key_of(const LinearArgs& a, bool bias, bool out_f32, int64_t ld_out, const void* out) {
    return {a.T,           a.N, a.K, a.ld_x, ld_out, int64_t(a.dtype), out_f32, bias, alignment(a.w), alignment(a.x),
            alignment(out)};
}

void run_plan(LtState& s, const Plan& p, const LinearArgs& a, const void* bias, void* out, cudaStream_t stream) {
    if (p.fused_bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasLtMatmul(s.handle, p.desc, &one, a.w, p.a, a.x, p.b, &zero, out, p.c, out, p.c, &p.algo,
                                s.workspace, kWorkspaceBytes, stream));
}

template <class TIn, class TOut>
void gemv_typed(const LinearArgs& a, cudaStream_t stream, int sm_count) {
    constexpr int kWarps = gemv::kThreads / 32;
    const int64_t grid = std::min<int64_t>(ceil_div(a.N, kWarps), int64_t(sm_count) * gemv::kBlocksPerSm);
    const gemv::GemvParams p{a.x, a.w, a.bias, a.out, a.T, a.N, a.K, a.ld_x, a.ld_out};
    auto kernel = a.T == 1 ? gemv::gemv_kernel<TIn, TOut, 1>
                           : (a.T == 2 ? gemv::gemv_kernel<TIn, TOut, 2> : gemv::gemv_kernel<TIn, TOut, 4>);
    launch_pdl(kernel, dim3(unsigned(grid)), dim3(gemv::kThreads), 0, stream, p);
}

}  // namespace

void launch_linear(Context& ctx, const LinearArgs& a) {
    if (a.T == 0 || a.N == 0) return;
    MOEX_REQUIRE(a.dtype == DType::kBF16 || a.dtype == DType::kF32, ErrorCode::kUnsupported,
                 "linear: activations must be bf16 or f32");
    Context::Impl& s = ctx.impl();
    if (a.K == 0 || choose_linear_kernel(a) == LinearKernel::kGemv) {
        if (a.dtype == DType::kF32) return gemv_typed<float, float>(a, s.stream, s.sm_count);
        if (a.out_f32) return gemv_typed<__nv_bfloat16, float>(a, s.stream, s.sm_count);
        return gemv_typed<__nv_bfloat16, __nv_bfloat16>(a, s.stream, s.sm_count);
    }
    const bool bias = a.bias != nullptr;
    const Plan& p = get_plan(*s.lt, key_of(a, bias, a.out_f32, a.ld_out, a.out));
    if (!bias || p.fused_bias) return run_plan(*s.lt, p, a, a.bias, a.out, s.stream);
    // No fused bias for this combination: GEMM into f32 scratch, then one rounding with the bias added.
    auto* y = static_cast<float*>(s.ensure(s.linear_f32, size_t(a.T) * size_t(a.N) * sizeof(float)));
    const Plan& q = get_plan(*s.lt, key_of(a, false, true, a.N, y));
    run_plan(*s.lt, q, a, nullptr, y, s.stream);
    launch_bias_epilogue({y, a.bias, a.out, a.T, a.N, a.ld_out, a.dtype, a.out_f32}, s.stream);
}

}  // namespace moex::cuda::model
