// ExpertsProblem -> cuda::ExpertsArgs (the one place the call is described for the kernels), and the CUDA probe.
#include "src/backends/cuda_bridge.h"

#include "moex/error.h"

namespace moex::backends {

#if MOEX_WITH_CUDA

void run_cuda(const ExpertsProblem& p, const TensorView& out, cuda::Algo algo, const RunOptions& options) {
    const auto data = [](const TensorView& t) -> const void* { return t.defined() ? t.data : nullptr; };
    const cuda::ExpertsArgs args{
        .hidden_states = p.hidden_states.data,
        .top_k_index = p.top_k_index.data,
        .top_k_weights = p.top_k_weights.data,
        .gate_up_proj = p.gate_up_proj.data,
        .down_proj = p.down_proj.data,
        .gate_up_bias = data(p.gate_up_bias),
        .down_bias = data(p.down_bias),
        .out = out.data,
        .T = p.T(),
        .H = p.H(),
        .I = p.I(),
        .E = p.E(),
        .k = p.k(),
        .dtype = p.dtype(),
        .ids_i64 = p.top_k_index.dtype == DType::kI64,
        .weights_f32 = p.top_k_weights.dtype == DType::kF32,
        .has_gate = p.has_gate,
        .is_transposed = p.is_transposed,
        .gate = {.activation = p.activation,
                 .kind = p.gate,
                 .concatenated = p.is_concatenated,
                 .alpha = p.swiglu_alpha,
                 .limit = p.swiglu_limit},
        .weight_dtype = p.gate_up_proj.dtype,
        .gate_up_scales = {},
        .down_scales = {},
    };
    cuda::run_experts(args, algo, options.cuda_stream);
}

std::optional<std::string> cuda_unavailable() {
    std::string why;
    if (!cuda::device_ready(&why)) return why;
    return std::nullopt;
}

#else

void run_cuda(const ExpertsProblem&, const TensorView&, cuda::Algo, const RunOptions&) {
    fail(ErrorCode::kUnsupported, "this build of moex has no CUDA support");
}

std::optional<std::string> cuda_unavailable() {
    return std::string("this build of moex has no CUDA support (configure with MOEX_CUDA=ON and nvcc)");
}

#endif

}  // namespace moex::backends
