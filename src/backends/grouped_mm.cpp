// The `grouped_mm` backend: CPU kernels in src/cpu/, CUDA kernels behind cuda/launch.h.
#include "src/backends/builtin.h"
#include "src/backends/cuda_args.h"
#include "src/cpu/experts_cpu.h"

namespace moex::backends {
namespace {

class GroupedMm final : public Backend {
   public:
    std::string_view name() const override { return "grouped_mm"; }
    std::string_view description() const override {
        return "Sorts rows by expert and runs grouped GEMMs over per-expert offsets, then a deterministic combine; for prefill.";
    }
    std::vector<Device> devices() const override { return {Device::kCPU, Device::kCUDA}; }
    std::optional<std::string> unavailable(Device device) const override {
        return device == Device::kCUDA ? cuda_unavailable() : std::nullopt;
    }
    bool host_synchronizes(Device) const override { return false; }
    void run(const ExpertsProblem& p, const TensorView& out, const RunOptions& options) const override {
        check_runnable(*this, p, out);
        if (p.T() == 0) return;
        if (p.device() == Device::kCUDA) return run_cuda(p, out, CudaAlgo::kGrouped, options);
        cpu::run_grouped(p, out, options.num_threads);
    }
};

}  // namespace

std::shared_ptr<const Backend> make_grouped_mm() { return std::make_shared<GroupedMm>(); }

}  // namespace moex::backends
