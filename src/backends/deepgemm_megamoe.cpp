// The `deepgemm_megamoe` backend: fused expert-parallel dispatch + gated MLP + combine across GPUs (CUDA only), a
// load-time choice. moex has the expert-parallel group (include/moex/ep.h) but not the fused kernel: every run says so.
#include "moex/error.h"
#include "src/backends/portable_backend.h"

namespace moex::backends {
namespace {

class DeepGemmMegaMoe final : public Backend {
   public:
    std::string_view name() const override { return "deepgemm_megamoe"; }
    std::string_view description() const override {
        return "Fused expert-parallel dispatch + gated MLP + combine (a load-time choice); not built: every run "
               "refuses.";
    }
    bool load_time_only() const override { return true; }
    std::vector<Device> devices() const override { return {Device::kCUDA}; }
    std::vector<DType> dtypes() const override { return {DType::kBF16}; }
    std::optional<std::string> unavailable(Device device) const override {
        if (device != Device::kCUDA) return std::string("deepgemm_megamoe is not supported on CPU (CUDA only)");
        if (auto why = cuda_unavailable()) return why;
        return std::string(
            "deepgemm_megamoe (the fused dispatch + MLP + combine kernel) is not implemented in this "
            "build; run experts inside a moex::EpRunner group with grouped_mm or batched_mm instead");
    }
    void run(const ExpertsProblem& p, const TensorView& out, const RunOptions&) const override {
        check_runnable(p, out);
    }
};

}  // namespace

std::shared_ptr<const Backend> make_deepgemm_megamoe() { return std::make_shared<DeepGemmMegaMoe>(); }

}  // namespace moex::backends
