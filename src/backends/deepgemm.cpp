// The `deepgemm` backend: bf16 experts through a TMA-aligned Hopper grouped GEMM (CUDA only, sm_90).
// moex runs it on its own sm_90a grouped GEMM (the grouped_mm CUDA path) with DeepGEMM's restrictions.
#include "moex/error.h"
#include "src/backends/builtin.h"
#include "src/backends/cuda_args.h"

namespace moex::backends {
namespace {

class DeepGemm final : public Backend {
   public:
    std::string_view name() const override { return "deepgemm"; }
    std::string_view description() const override {
        return "Sorted, TMA-aligned grouped GEMM for bf16 experts on Hopper (DeepGEMM's contract).";
    }
    std::vector<Device> devices() const override { return {Device::kCUDA}; }
    std::vector<DType> dtypes() const override { return {DType::kBF16}; }
    std::optional<std::string> unavailable(Device device) const override {
        if (device != Device::kCUDA) return std::string("deepgemm is not supported on CPU (CUDA only)");
        return cuda_unavailable();
    }
    std::optional<std::string> why_not(const ExpertsProblem& p) const override {
        if (auto why = unavailable(p.device())) return why;
        if (p.dtype() != DType::kBF16)
            return "DeepGEMM experts path requires bfloat16 hidden states, got " + std::string(dtype_name(p.dtype()));
        return std::nullopt;
    }
    void run(const ExpertsProblem& p, const TensorView& out, const RunOptions& options) const override {
        check_runnable(*this, p, out);
        if (p.T() == 0) return;
        run_cuda(p, out, CudaAlgo::kGrouped, options);
    }
};

}  // namespace

std::shared_ptr<const Backend> make_deepgemm() { return std::make_shared<DeepGemm>(); }

}  // namespace moex::backends
