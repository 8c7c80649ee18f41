// ExpertsProblem -> cuda::ExpertsArgs, and the CUDA entry point shared by eager, batched_mm and grouped_mm.
#include "src/backends/cuda_args.h"

#include "moex/error.h"
#if MOEX_WITH_CUDA
#include "cuda/launch.h"
#endif

namespace moex::backends {

void run_cuda(const ExpertsProblem& p, const TensorView& out, CudaAlgo algo, const RunOptions& options) {
#if MOEX_WITH_CUDA
    const cuda::ActDType dt = p.dtype() == DType::kBF16  ? cuda::ActDType::kBF16
                              : p.dtype() == DType::kF16 ? cuda::ActDType::kF16
                                                         : cuda::ActDType::kF32;
    const cuda::ExpertsArgs args{
        .x = p.hidden_states.data,
        .ids = p.top_k_index.data,
        .topk_weights = p.top_k_weights.data,
        .w_up = p.gate_up_proj.data,
        .w_down = p.down_proj.data,
        .b_up = p.gate_up_bias.defined() ? p.gate_up_bias.data : nullptr,
        .b_down = p.down_bias.defined() ? p.down_bias.data : nullptr,
        .out = out.data,
        .T = p.T(), .H = p.H(), .I = p.I(), .E = p.E(), .k = p.k(),
        .dtype = dt,
        .ids_i64 = p.top_k_index.dtype == DType::kI64,
        .weights_f32 = p.top_k_weights.dtype == DType::kF32,
        .has_gate = p.has_gate,
        .is_transposed = p.is_transposed,
        .is_concatenated = p.is_concatenated,
        .activation = int32_t(p.activation),
        .gate_kind = int32_t(p.gate),
        .swiglu_alpha = p.swiglu_alpha,
        .swiglu_limit = p.swiglu_limit,
    };
    cuda::run_experts(args, static_cast<cuda::Algo>(algo), options.cuda_stream);
#else
    (void)p, (void)out, (void)algo, (void)options;
    fail(ErrorCode::kUnsupported, "this build of moex has no CUDA support");
#endif
}

}  // namespace moex::backends
