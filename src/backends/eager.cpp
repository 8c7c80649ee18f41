// The `eager` backend: CPU kernels in src/cpu/, CUDA kernels behind cuda/launch.h.
#include "src/backends/builtin.h"
#include "src/backends/cuda_args.h"
#include "src/cpu/experts_cpu.h"

namespace moex::backends {
namespace {

class Eager final : public Backend {
   public:
    std::string_view name() const override { return "eager"; }
    std::string_view description() const override {
        return "Reference loop over the experts that are hit; each runs its tokens through two GEMMs.";
    }
    std::vector<Device> devices() const override { return {Device::kCPU, Device::kCUDA}; }
    std::optional<std::string> unavailable(Device device) const override {
        return device == Device::kCUDA ? cuda_unavailable() : std::nullopt;
    }
    bool host_synchronizes(Device device) const override { return device == Device::kCUDA; }
    void run(const ExpertsProblem& p, const TensorView& out, const RunOptions& options) const override {
        check_runnable(*this, p, out);
        if (p.T() == 0) return;
        if (p.device() == Device::kCUDA) return run_cuda(p, out, CudaAlgo::kEager, options);
        cpu::run_eager(p, out, options.num_threads);
    }
};

}  // namespace

std::shared_ptr<const Backend> make_eager() { return std::make_shared<Eager>(); }

}  // namespace moex::backends
