// run_experts: checks the plain ExpertsArgs (the host validated the problem; these guard the kernels' own limits)
// and dispatches to the eager, batched, grouped or deepgemm pipeline on the caller's stream.
#include <string>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/experts/pipelines.h"

namespace moex::cuda {

void run_experts(const ExpertsArgs& a, Algo algo, void* stream) {
    MOEX_REQUIRE(a.T >= 0 && a.H > 0 && a.I > 0 && a.E > 0 && a.k > 0, ErrorCode::kInvalidArgument,
                 "run_experts: T must be >= 0 and H, I, E, k > 0");
    if (a.T == 0) return;
    MOEX_REQUIRE(a.hidden_states && a.top_k_index && a.top_k_weights && a.gate_up_proj && a.down_proj && a.out,
                 ErrorCode::kInvalidArgument, "run_experts: null tensor pointer");
    MOEX_REQUIRE(is_float_activation(a.dtype), ErrorCode::kInvalidArgument,
                 "run_experts: activations must be bf16, f16 or f32, not " + std::string(dtype_name(a.dtype)));
    const bool quant = a.gate_up_scales.format != QuantFormat::kNone;
    MOEX_REQUIRE(quant ? a.down_scales.format == a.gate_up_scales.format && a.gate_up_scales.data &&
                             a.down_scales.data && !a.is_transposed
                       : a.weight_dtype == a.dtype && a.act_quant.mode == ActivationQuant::kNone,
                 ErrorCode::kUnsupported,
                 "run_experts: " + std::string(dtype_name(a.weight_dtype)) +
                     " weights: the CUDA experts kernels take weights in the activation dtype, or quantized (E, N, K) "
                     "weights with the scales of both projections");
    MOEX_REQUIRE(!quant || algo != Algo::kEager, ErrorCode::kUnsupported,
                 "run_experts: the eager pipeline takes no quantized weights (use batched_mm or grouped_mm)");
    MOEX_REQUIRE(a.has_gate || (a.gate.concatenated && a.gate.kind == GateKind::kDefault), ErrorCode::kInvalidArgument,
                 "run_experts: the interleaved layout and the gpt-oss gate need a gate");
    MOEX_REQUIRE(a.T * a.k < (int64_t(1) << 30), ErrorCode::kUnsupported,
                 "run_experts: T*k = " + std::to_string(a.T * a.k) + " routed rows; at most 2^30 are supported");
    if (a.saved_gate_up != nullptr || a.saved_slot_row != nullptr) {
        const char* why = algo != Algo::kGrouped ? "only grouped_mm's pipeline keeps it" : grouped_save_why_not(a);
        MOEX_REQUIRE(why == nullptr && a.saved_gate_up && a.saved_slot_row, ErrorCode::kUnsupported,
                     std::string("run_experts: this call cannot keep the gate/up pre-activation for the backward: ") +
                         (why ? why : "saved_gate_up and saved_slot_row come together"));
    }
    const cudaStream_t s = as_stream(stream);
    switch (algo) {
        case Algo::kEager: return run_eager(a, s);
        case Algo::kBatched: return run_batched(a, s);
        case Algo::kGrouped: return run_grouped(a, s);
        case Algo::kDeepGemm: return run_deepgemm(a, s);
    }
    fail(ErrorCode::kInvalidArgument, "run_experts: unknown algorithm");
}

}  // namespace moex::cuda
