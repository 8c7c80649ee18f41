// The `deepgemm` backend as built today: DeepGEMM's bf16 contract (CUDA only, bf16 experts) run by moex's own sm_90a
// grouped_mm pipeline (cuda/experts/grouped.cu). The FP8/FP4 TMA-aligned kernels of the name are issue #11's work.
#include "moex/error.h"
#include "src/backends/portable_backend.h"

namespace moex::backends {
namespace {

std::optional<std::string> refusal(const ExpertsProblem& p) {
    if (p.dtype() != DType::kBF16)
        return "DeepGEMM experts path requires bfloat16 hidden states, got " + std::string(dtype_name(p.dtype()));
    return std::nullopt;
}

}  // namespace

std::shared_ptr<const Backend> make_deepgemm() {
    return std::make_shared<CudaRestriction>(
        "deepgemm",
        "DeepGEMM's contract (bf16 experts, CUDA only), run by moex's sm_90a grouped_mm pipeline; no FP8/FP4 kernels "
        "yet.",
        std::vector<DType>{DType::kBF16}, cuda::Algo::kGrouped, &refusal);
}

}  // namespace moex::backends
