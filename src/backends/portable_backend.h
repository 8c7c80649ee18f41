// The two shapes most built-in backends take:
//  - PortableBackend: CPU and CUDA, a CPU kernel (src/cpu) and a CUDA experts algorithm (eager, batched_mm,
//  grouped_mm);
//  - CudaRestriction: CUDA only, a CUDA algorithm under the narrower contract of a named library (deepgemm runs its
//    own pipeline on the TMA kernels; sonicmoe runs moex's grouped_mm pipeline within the limits its reference has).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moex/backend.h"
#include "moex/error.h"
#include "src/backends/cuda_bridge.h"
#include "src/core/finite_check.h"

namespace moex::backends {

class PortableBackend final : public Backend {
   public:
    using CpuKernel = void (*)(const ExpertsProblem&, const TensorView&, int num_threads);
    PortableBackend(std::string_view name, std::string_view description, CpuKernel cpu, cuda::Algo cuda,
                    bool cuda_syncs, bool cuda_quant, bool cuda_backward)
        : name_(name),
          description_(description),
          cpu_(cpu),
          cuda_(cuda),
          cuda_syncs_(cuda_syncs),
          cuda_quant_(cuda_quant),
          cuda_backward_(cuda_backward) {}
    std::string_view name() const override { return name_; }
    std::string_view description() const override { return description_; }
    std::vector<Device> devices() const override { return {Device::kCPU, Device::kCUDA}; }
    std::optional<std::string> unavailable(Device device) const override {
        return device == Device::kCUDA ? cuda_unavailable() : std::nullopt;
    }
    bool host_synchronizes(Device device) const override { return device == Device::kCUDA && cuda_syncs_; }
    // The CPU kernels dequantize FP8 and FP4 panels inside the GEMM; on CUDA the batched and grouped pipelines take
    // every format (cuda_quant), eager none.
    std::vector<QuantFormat> quant_formats(Device device) const override {
        if (device == Device::kCUDA && !cuda_quant_) return {};
        return {QuantFormat::kFp8, QuantFormat::kMxfp4, QuantFormat::kNvfp4};
    }
    std::optional<std::string> why_not(const ExpertsProblem& p) const override {
        if (auto why = Backend::why_not(p)) return why;
        if (p.device() == Device::kCUDA && p.quant.enabled()) return cuda_quant_refusal(p);
        return std::nullopt;
    }
    void run(const ExpertsProblem& p, const TensorView& out, const RunOptions& options) const override {
        check_runnable(p, out, options);
        if (p.T() == 0) return;
        if (p.device() == Device::kCUDA) {
            run_cuda(p, out, cuda_, options);
        } else {
            cpu_(p, out, options.num_threads);
        }
        core::check_finite(p, out, options, name_);
    }
    // One CPU backward serves all three, one CUDA backward the backends with cuda_backward (experts_backward).
    bool has_backward(Device device) const override {
        return device == Device::kCPU || (device == Device::kCUDA && cuda_backward_);
    }
    void backward(const ExpertsProblem& p, const TensorView& grad_out, const ExpertsGrads& grads,
                  const RunOptions& options) const override {
        if (!has_backward(p.device())) return Backend::backward(p, grad_out, grads, options);
        experts_backward(p, grad_out, grads, options.num_threads, options.cuda_stream, options.saved);
    }
    // grouped_mm on CUDA keeps its gate/up pre-activation for the tensor-core backward; the CPU backward recomputes.
    std::optional<std::string> save_refusal(const ExpertsProblem& p) const override {
        if (p.device() != Device::kCUDA || !cuda_backward_) return Backend::save_refusal(p);
        return cuda_save_refusal(p, cuda_);
    }

   private:
    std::string_view name_, description_;
    CpuKernel cpu_;
    cuda::Algo cuda_;
    bool cuda_syncs_, cuda_quant_, cuda_backward_;
};

class CudaRestriction final : public Backend {
   public:
    // Why the restriction refuses a problem the CUDA algorithm could run; nullopt = it accepts it.
    using Refusal = std::optional<std::string> (*)(const ExpertsProblem&);
    // with_backward: the CUDA experts backward (experts_backward) serves it, under the same refusals.
    CudaRestriction(std::string_view name, std::string_view description, std::vector<DType> dtypes, cuda::Algo cuda,
                    Refusal refusal, std::vector<QuantFormat> quant = {}, bool with_backward = false)
        : name_(name),
          description_(description),
          dtypes_(std::move(dtypes)),
          quant_(std::move(quant)),
          cuda_(cuda),
          refusal_(refusal),
          with_backward_(with_backward) {}
    std::string_view name() const override { return name_; }
    std::string_view description() const override { return description_; }
    std::vector<Device> devices() const override { return {Device::kCUDA}; }
    std::vector<DType> dtypes() const override { return dtypes_; }
    std::vector<QuantFormat> quant_formats(Device device) const override {
        return device == Device::kCUDA ? quant_ : std::vector<QuantFormat>{};
    }
    std::optional<std::string> unavailable(Device device) const override {
        if (device != Device::kCUDA) return std::string(name_) + " is not supported on CPU (CUDA only)";
        return cuda_unavailable();
    }
    std::optional<std::string> why_not(const ExpertsProblem& p) const override {
        if (auto why = Backend::why_not(p)) return why;
        return refusal_(p);
    }
    void run(const ExpertsProblem& p, const TensorView& out, const RunOptions& options) const override {
        check_runnable(p, out, options);
        if (p.T() == 0) return;
        run_cuda(p, out, cuda_, options);
        core::check_finite(p, out, options, name_);
    }
    bool has_backward(Device device) const override { return device == Device::kCUDA && with_backward_; }
    void backward(const ExpertsProblem& p, const TensorView& grad_out, const ExpertsGrads& grads,
                  const RunOptions& options) const override {
        if (!has_backward(p.device())) return Backend::backward(p, grad_out, grads, options);
        if (auto why = why_not(p)) fail(ErrorCode::kUnsupported, std::string(name_) + " backward: " + *why);
        experts_backward(p, grad_out, grads, options.num_threads, options.cuda_stream, options.saved);
    }
    std::optional<std::string> save_refusal(const ExpertsProblem& p) const override {
        if (!with_backward_) return Backend::save_refusal(p);
        if (auto why = why_not(p)) return why;
        return cuda_save_refusal(p, cuda_);
    }

   private:
    std::string_view name_, description_;
    std::vector<DType> dtypes_;
    std::vector<QuantFormat> quant_;
    cuda::Algo cuda_;
    Refusal refusal_;
    bool with_backward_;
};

}  // namespace moex::backends
