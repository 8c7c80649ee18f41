// The built-in backends' factories and the small base they share. Only registry.cpp calls the factories.
#pragma once

#include <memory>

#include "moex/backend.h"
#include "src/backends/cuda_args.h"

namespace moex::backends {

std::shared_ptr<const Backend> make_eager();
std::shared_ptr<const Backend> make_batched_mm();
std::shared_ptr<const Backend> make_grouped_mm();
std::shared_ptr<const Backend> make_deepgemm();
std::shared_ptr<const Backend> make_deepgemm_megamoe();
std::shared_ptr<const Backend> make_sonicmoe();

// Validates problem and output, checks why_not(), then leaves the call to the subclass. T = 0 launches nothing.
void check_runnable(const Backend& backend, const ExpertsProblem& problem, const TensorView& out);

// Why CUDA cannot run here (no CUDA in this build, no device, wrong architecture); nullopt = it can.
std::optional<std::string> cuda_unavailable();

// eager, batched_mm and grouped_mm share one shape: CPU and CUDA, a CPU kernel (src/cpu) or a CUDA algorithm.
class PortableBackend final : public Backend {
   public:
    using CpuKernel = void (*)(const ExpertsProblem&, const TensorView&, int num_threads);
    PortableBackend(std::string_view name, std::string_view description, CpuKernel cpu, CudaAlgo cuda, bool cuda_syncs)
        : name_(name), description_(description), cpu_(cpu), cuda_(cuda), cuda_syncs_(cuda_syncs) {}
    std::string_view name() const override { return name_; }
    std::string_view description() const override { return description_; }
    std::vector<Device> devices() const override { return {Device::kCPU, Device::kCUDA}; }
    std::optional<std::string> unavailable(Device device) const override {
        return device == Device::kCUDA ? cuda_unavailable() : std::nullopt;
    }
    bool host_synchronizes(Device device) const override { return device == Device::kCUDA && cuda_syncs_; }
    void run(const ExpertsProblem& p, const TensorView& out, const RunOptions& options) const override {
        check_runnable(*this, p, out);
        if (p.T() == 0) return;
        if (p.device() == Device::kCUDA) return run_cuda(p, out, cuda_, options);
        cpu_(p, out, options.num_threads);
    }

   private:
    std::string_view name_, description_;
    CpuKernel cpu_;
    CudaAlgo cuda_;
    bool cuda_syncs_;
};

}  // namespace moex::backends
