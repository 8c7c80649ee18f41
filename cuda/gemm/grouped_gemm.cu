// launch_grouped_gemm (the chooser: the sm_90a WGMMA kernel for bf16/f16 when it accepts the shape, else the
// portable kernel) and launch_grouped_gemm_portable with its instantiation list.

#include "cuda/common/align.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/env.h"
#include "cuda/gemm/grouped_gemm.h"
#include "cuda/gemm/grouped_gemm_portable.cuh"

namespace moex::cuda {

bool gemm_forced_portable() {
    static const bool forced = env_is("MOEX_GEMM", "portable");
    return forced;
}

namespace {

template <class T, int V, bool kNMajor, bool kQuant = false>
void launch_portable_as(const GroupedGemmArgs& g, cudaStream_t stream) {
    using namespace gemm_portable;
    auto kernel = grouped_gemm_portable_kernel<T, V, kNMajor, kQuant>;
    constexpr size_t smem = smem_bytes<T>();
    static_assert(smem <= 227 * 1024, "portable GEMM tile does not fit in shared memory");
    allow_dynamic_smem(kernel, smem);
    const bool gate = g.epilogue == Epilogue::kGate;
    const int64_t cols = gate ? ceil_div(g.N / 2, kBN / 2) : ceil_div(g.N, kBN);
    MOEX_REQUIRE(cols <= 65535 && g.max_m_tiles < (int64_t(1) << 31), ErrorCode::kUnsupported,
                 "grouped GEMM: N or P too large for the portable kernel's grid");
    const dim3 grid(unsigned(g.max_m_tiles), unsigned(cols));
    kernel<<<grid, kThreads, smem, stream>>>(g);
    MOEX_LAUNCH_CHECK();
}

template <class T>
void launch_portable_typed(const GroupedGemmArgs& g, cudaStream_t stream) {
    constexpr int V = 16 / int(sizeof(T));  // elements per 16-byte vector
    const bool gate_concat = g.epilogue == Epilogue::kGate && g.gate.concatenated;
    const bool vec =
        g.K % V == 0 && g.N % V == 0 && (!gate_concat || (g.N / 2) % V == 0) && is_aligned16(g.A) && is_aligned16(g.B);
    if (g.b_scales.format != QuantFormat::kNone) {  // K-major codes (validated by run_experts)
        if (vec) return launch_portable_as<T, V, false, true>(g, stream);
        return launch_portable_as<T, 1, false, true>(g, stream);
    }
    if (g.b_n_major) {
        if (vec) return launch_portable_as<T, V, true>(g, stream);
        return launch_portable_as<T, 1, true>(g, stream);
    }
    if (vec) return launch_portable_as<T, V, false>(g, stream);
    return launch_portable_as<T, 1, false>(g, stream);
}

}  // namespace

void launch_grouped_gemm_portable(const GroupedGemmArgs& g, void* stream) {
    MOEX_REQUIRE(g.N > 0 && g.K > 0 && g.E > 0 && g.max_m_tiles >= 0, ErrorCode::kInvalidArgument,
                 "grouped GEMM: empty N, K or E");
    MOEX_REQUIRE(g.epilogue != Epilogue::kGate || g.N % 2 == 0, ErrorCode::kInvalidArgument,
                 "grouped GEMM: the gate epilogue needs an even N");
    MOEX_REQUIRE(g.expert_scale == nullptr, ErrorCode::kUnsupported,
                 "grouped GEMM: per-expert accumulator scales are an sm_90a kernel feature");
    MOEX_REQUIRE(g.epilogue != Epilogue::kGateE4m3, ErrorCode::kUnsupported,
                 "grouped GEMM: the gate epilogue into e4m3 codes is an sm_90a FP8 kernel feature");
    MOEX_REQUIRE(g.epilogue != Epilogue::kGateSave, ErrorCode::kUnsupported,
                 "grouped GEMM: the gate epilogue that keeps the pre-activation is an sm_90a kernel feature");
    if (g.max_m_tiles == 0) return;
    const cudaStream_t s = as_stream(stream);
    switch (g.dtype) {
        case DType::kBF16: return launch_portable_typed<__nv_bfloat16>(g, s);
        case DType::kF16: return launch_portable_typed<__half>(g, s);
        case DType::kF32: return launch_portable_typed<float>(g, s);
        default: fail(ErrorCode::kInvalidArgument, "grouped GEMM: activations must be bf16, f16 or f32");
    }
}

void launch_grouped_gemm(const GroupedGemmArgs& g, void* stream) {
    const bool quant = g.b_scales.format != QuantFormat::kNone;
    MOEX_REQUIRE(quant ? g.b_scales.data != nullptr && !g.b_n_major : g.b_dtype == g.dtype, ErrorCode::kUnsupported,
                 "grouped GEMM: weights must be stored in the activation dtype, or quantized K-major with scales");
    if (g.a_fp8) {  // e4m3 A: the pipeline asked grouped_gemm_takes_fp8 first
        MOEX_REQUIRE(launch_grouped_gemm_sm90(g, stream), ErrorCode::kUnsupported,
                     "grouped GEMM: e4m3 activations need the sm_90a FP8 kernel, which refused these arguments");
        return;
    }
    if (g.dtype != DType::kF32 && !gemm_forced_portable() && launch_grouped_gemm_sm90(g, stream)) return;
    launch_grouped_gemm_portable(g, stream);
}

}  // namespace moex::cuda
