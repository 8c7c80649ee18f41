// The `deepgemm` backend: DeepGEMM's contract on Hopper (CUDA only, bf16 hidden states) run by moex's deepgemm
// pipeline (cuda/experts/deepgemm.cu): the padded-contiguous layout and the sm_90a TMA grouped GEMMs in bf16, or
// FP8 x FP8 with per-1x128 e4m3 activations and 128 x 128 float32 / UE8M0 weight scales, and FP4 weights (which
// DeepGEMM refuses before sm_100) converted to bf16 inside the kernel (or, for shapes it refuses, dequantized to bf16
// for the routed experts first). The refusals follow transformers'
// integrations/deepgemm.py word for word where it has one.
#include <cstdint>
#include <string>

#include "moex/error.h"
#include "src/backends/portable_backend.h"

namespace moex::backends {

std::optional<std::string> deepgemm_refusal(const ExpertsProblem& p) {
    if (p.dtype() != DType::kBF16)
        return "DeepGEMM experts path requires bfloat16 hidden states, got " + std::string(dtype_name(p.dtype()));
    if (p.H() % 8 != 0 || p.I() % 8 != 0)
        return "deepgemm's TMA kernels need H and I to be multiples of 8 (16-byte rows); got H=" +
               std::to_string(p.H()) + ", I=" + std::to_string(p.I()) + " (grouped_mm runs any shape)";
    const auto misaligned = [](const TensorView& t, uintptr_t bytes) {
        return t.defined() && reinterpret_cast<uintptr_t>(t.data) % bytes != 0;
    };
    if (misaligned(p.gate_up_proj, 16) || misaligned(p.down_proj, 16))
        return std::string("deepgemm's TMA kernels need 16-byte aligned expert weights (grouped_mm takes any)");
    if (misaligned(p.gate_up_bias, 4) || misaligned(p.down_bias, 4))
        return std::string("deepgemm's TMA kernels need 4-byte aligned biases (grouped_mm takes any)");
    const ExpertsQuant& q = p.quant;
    if (!q.enabled()) return std::nullopt;
    if (q.activations == ActivationQuant::kStatic)
        return std::string("DeepGEMM experts dispatch does not support static activation quantization.");
    if (q.format != QuantFormat::kFp8) return std::nullopt;  // FP4: converted to bf16 on the device
    if (q.block_n == 0 && q.block_k == 0)
        return std::string(
            "DeepGEMM requires block-wise quantized FP8 weights (weight_block_size=(128, 128)); got per-tensor scales");
    if (q.block_n != 128 || q.block_k != 128)
        return "DeepGEMM's FP8 recipe takes weight_block_size (128, 128); got (" + std::to_string(q.block_n) + ", " +
               std::to_string(q.block_k) + ")";
    if (q.activations != ActivationQuant::kDynamic)
        return std::string(
            "deepgemm runs FP8 weights with activations quantized per 1 x 128 (activation_scheme dynamic); "
            "weight-only FP8 keeps bf16 activations: use grouped_mm");
    return std::nullopt;
}

std::shared_ptr<const Backend> make_deepgemm() {
    return std::make_shared<CudaRestriction>(
        "deepgemm",
        "DeepGEMM's contract (bf16 hidden states, CUDA sm_90 only): padded-contiguous layout and TMA grouped GEMMs in "
        "bf16 or FP8 x FP8 (1x128 activations, 128x128 float/UE8M0 weight scales); FP4 weights converted to bf16 "
        "inside the GEMM.",
        std::vector<DType>{DType::kBF16}, cuda::Algo::kDeepGemm, &deepgemm_refusal,
        std::vector<QuantFormat>{QuantFormat::kFp8, QuantFormat::kMxfp4, QuantFormat::kNvfp4});
}

}  // namespace moex::backends
