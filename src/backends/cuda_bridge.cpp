// ExpertsProblem -> cuda::ExpertsArgs (the one place the call is described for the kernels), the backward's args on
// top of them, and the CUDA probe.
#include "src/backends/cuda_bridge.h"

#include <bit>

#include "cuda/backward/backward.h"
#include "moex/error.h"
#include "moex/quant.h"

namespace moex::backends {
std::optional<std::string> cuda_quant_refusal(const ExpertsProblem& p) {
    const ExpertsQuant& q = p.quant;
    if (q.format != QuantFormat::kFp8) return std::nullopt;  // FP4 groups are 32 (mxfp4) and 16 (nvfp4)
    if (q.block_n == 0 && q.block_k == 0) return std::nullopt;
    const auto pow2 = [](int64_t v) { return v > 0 && std::has_single_bit(uint64_t(v)); };
    if (!pow2(q.block_n) || !pow2(q.block_k) || q.block_k < 32)
        return "the CUDA experts kernels take FP8 blocks whose sides are powers of two, at least 32 along K; got " +
               std::to_string(q.block_n) + "x" + std::to_string(q.block_k) + " (run it on the CPU)";
    return std::nullopt;
}

#if MOEX_WITH_CUDA

namespace {

// Block length -> shift; 0 (per-tensor) is one block (shift 62).
int32_t block_shift(int64_t block) { return block == 0 ? 62 : int32_t(std::countr_zero(uint64_t(block))); }

// One projection's scales (weights (E, N, K)) in the kernels' terms.
cuda::WeightScales weight_scales(const ExpertsQuant& q, const ProjectionQuant& pq) {
    cuda::WeightScales s;
    if (!q.enabled()) return s;
    s.format = q.format;
    s.data = pq.scale_inv.data;
    s.dtype = pq.scale_inv.dtype;
    s.rows_b = int32_t(pq.scale_inv.shape[1]);
    s.cols_b = int32_t(pq.scale_inv.shape[2]);
    if (q.format == QuantFormat::kFp8) {
        s.row_shift = block_shift(q.block_n), s.col_shift = block_shift(q.block_k);
    } else {
        s.row_shift = 0, s.col_shift = q.format == QuantFormat::kMxfp4 ? 5 : 4;
        if (pq.global_scale.defined()) s.global = static_cast<const float*>(pq.global_scale.data);
    }
    return s;
}

cuda::ActQuant act_quant(const ExpertsProblem& p) {
    const ExpertsQuant& q = p.quant;
    cuda::ActQuant a;
    if (!q.enabled() || q.activations == ActivationQuant::kNone) return a;
    a.mode = q.activations;
    if (q.activations == ActivationQuant::kStatic) {
        a.up_scale = static_cast<const float*>(q.gate_up.activation_scale.data);
        a.down_scale = static_cast<const float*>(q.down.activation_scale.data);
    }
    return a;
}

// The call as the kernels see it; `out` is the forward's output (nullptr for the backward).
cuda::ExpertsArgs experts_args(const ExpertsProblem& p, void* out) {
    const auto data = [](const TensorView& t) -> const void* { return t.defined() ? t.data : nullptr; };
    return cuda::ExpertsArgs{
        .hidden_states = p.hidden_states.data,
        .top_k_index = p.top_k_index.data,
        .top_k_weights = p.top_k_weights.data,
        .gate_up_proj = p.gate_up_proj.data,
        .down_proj = p.down_proj.data,
        .gate_up_bias = data(p.gate_up_bias),
        .down_bias = data(p.down_bias),
        .out = out,
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
        .gate_up_scales = weight_scales(p.quant, p.quant.gate_up),
        .down_scales = weight_scales(p.quant, p.quant.down),
        .act_quant = act_quant(p),
    };
}

// The forward's kept state (validated by the caller) as the kernels take it.
void keep(cuda::ExpertsArgs& a, const ExpertsSaved& s) {
    a.saved_gate_up = s.gate_up.data;
    a.saved_slot_row = static_cast<int32_t*>(s.slot_row.data);
}

}  // namespace

void run_cuda(const ExpertsProblem& p, const TensorView& out, cuda::Algo algo, const RunOptions& options) {
    if (p.quant.enabled()) {
        MOEX_REQUIRE(algo != cuda::Algo::kEager, ErrorCode::kUnsupported,
                     "the CUDA eager pipeline takes no quantized experts (use batched_mm or grouped_mm)");
        if (auto why = cuda_quant_refusal(p)) fail(ErrorCode::kUnsupported, *why);
    }
    cuda::ExpertsArgs args = experts_args(p, out.data);
    if (options.saved) keep(args, *options.saved);
    cuda::run_experts(args, algo, options.cuda_stream);
}

void run_cuda_backward(const ExpertsProblem& p, const TensorView& grad_out, const ExpertsGrads& g, void* stream,
                       const ExpertsSaved* saved) {
    if (auto why = cuda_unavailable()) fail(ErrorCode::kUnsupported, "experts backward on cuda: " + *why);
    const auto data = [](const TensorView& t) { return t.defined() ? t.data : nullptr; };
    cuda::ExpertsArgs fwd = experts_args(p, nullptr);
    if (saved) keep(fwd, *saved);
    const cuda::ExpertsBackwardArgs args{.fwd = fwd,
                                         .grad_out = grad_out.data,
                                         .grad_hidden = data(g.hidden_states),
                                         .grad_weights = data(g.top_k_weights),
                                         .grad_gate_up = data(g.gate_up_proj),
                                         .grad_down = data(g.down_proj),
                                         .grad_gate_up_bias = data(g.gate_up_bias),
                                         .grad_down_bias = data(g.down_bias)};
    cuda::run_experts_backward(args, stream);
}

std::optional<std::string> cuda_save_refusal(const ExpertsProblem& p, cuda::Algo algo) {
    if (p.device() != Device::kCUDA) return std::string("the tensors are not on a CUDA device");
    if (algo != cuda::Algo::kGrouped) return std::string("only grouped_mm's pipeline keeps the pre-activation");
    if (auto why = cuda_unavailable()) return why;
    if (const char* why = cuda::backward_save_why_not(experts_args(p, nullptr))) return std::string(why);
    return std::nullopt;
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

void run_cuda_backward(const ExpertsProblem&, const TensorView&, const ExpertsGrads&, void*, const ExpertsSaved*) {
    fail(ErrorCode::kUnsupported, "experts backward on cuda: this build of moex has no CUDA support");
}

std::optional<std::string> cuda_save_refusal(const ExpertsProblem&, cuda::Algo) {
    return std::string("this build of moex has no CUDA support");
}

std::optional<std::string> cuda_unavailable() {
    return std::string("this build of moex has no CUDA support (configure with MOEX_CUDA=ON and nvcc)");
}

#endif

}  // namespace moex::backends
