// The `sonicmoe` backend as built today: SonicMoE's contract (CUDA only, bf16 gated experts with a SwiGLU / GeGLU /
// ReGLU gate) run by moex's sm_90a grouped_mm pipeline, and the CUDA experts backward grouped_mm has (cuda/backward/:
// activations recomputed from x, nothing (S, H)-sized kept, no float atomics; f32 SIMT GEMMs, not yet fused).
// Unlike the reference, which silently maps unknown activations to SwiGLU and ignores custom gates, moex refuses them.
#include "moex/error.h"
#include "src/backends/portable_backend.h"

namespace moex::backends {
namespace {

std::optional<std::string> refusal(const ExpertsProblem& p) {
    if (!p.has_gate) return std::string("sonicmoe requires gated experts (has_gate=true)");
    if (p.gate != GateKind::kDefault)
        return std::string("sonicmoe supports act(gate)*up gates only, not the gpt_oss clamped SwiGLU");
    if (p.activation == Activation::kGeluTanh)
        return std::string("sonicmoe supports silu, gelu and relu gates, not gelu_pytorch_tanh");
    if (p.dtype() != DType::kBF16)
        return "sonicmoe requires bfloat16 experts, got " + std::string(dtype_name(p.dtype()));
    return std::nullopt;
}

}  // namespace

std::shared_ptr<const Backend> make_sonicmoe() {
    return std::make_shared<CudaRestriction>(
        "sonicmoe",
        "SonicMoE's contract (bf16 gated silu/gelu/relu experts, CUDA only), run by moex's sm_90a grouped_mm "
        "pipeline; the CUDA backward of grouped_mm (recomputes the activations from x); neither is fused yet.",
        std::vector<DType>{DType::kBF16}, cuda::Algo::kGrouped, &refusal, std::vector<QuantFormat>{},
        /*with_backward=*/true);
}

}  // namespace moex::backends
