// The backend contract and the registry (ExpertsInterface): a backend answers name(), why_not(problem) and run().
// Names are Hugging Face's: eager, batched_mm, grouped_mm, deepgemm, deepgemm_megamoe, sonicmoe, plus user ones.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moex/backward.h"
#include "moex/experts.h"

namespace moex {

struct RunOptions {
    int num_threads = 0;          // CPU: 0 = all hardware threads
    void* cuda_stream = nullptr;  // CUDA: the caller's cudaStream_t (nullptr = default stream)
    // Debug: after the call, a NaN or infinity in the output is traced to its row, expert and stage and raised as
    // Error(kNonFinite) (also on with MOEX_CHECK_FINITE=1). It synchronizes the host: not under CUDA-graph capture.
    bool check_finite = false;
    // Training: run() keeps its gate/up pre-activation there (moex/backward.h; where save_refusal() allows it, else
    // run() raises Error(kUnsupported) with the reason); backward() reads what the forward kept. nullptr: neither.
    const ExpertsSaved* saved = nullptr;
};

class Backend {
   public:
    virtual ~Backend() = default;
    virtual std::string_view name() const = 0;
    virtual std::string_view description() const = 0;
    // Devices and activation dtypes the backend is written for (what `moex backends` prints).
    virtual std::vector<Device> devices() const = 0;
    virtual std::vector<DType> dtypes() const { return {DType::kBF16, DType::kF16, DType::kF32}; }
    // Quantized weight formats (moex/quant.h) it takes on `device`; none by default, so a backend written for
    // weights in the activation dtype is never handed FP8 or FP4 codes.
    virtual std::vector<QuantFormat> quant_formats(Device) const { return {}; }
    // Why this backend cannot run on `device` in this build and on this machine; nullopt = it can.
    virtual std::optional<std::string> unavailable(Device device) const;
    // Why this backend cannot run `problem`; nullopt = it can. Never throws for a valid problem.
    virtual std::optional<std::string> why_not(const ExpertsProblem& problem) const;
    // Whether run() may synchronise the host with the device (not CUDA-graph capturable).
    virtual bool host_synchronizes(Device) const { return false; }
    // A load-time choice (deepgemm_megamoe): a model never switches into or out of it at run time.
    virtual bool load_time_only() const { return false; }
    // Computes out (T, H). Validates the problem first (check_runnable); throws moex::Error on any violation.
    virtual void run(const ExpertsProblem& problem, const TensorView& out, const RunOptions& options) const = 0;
    // Whether backward() computes gradients on `device` (none by default: a backend trains only where it says so).
    virtual bool has_backward(Device) const { return false; }
    // The gradients of run()'s output (moex/backward.h). The default refuses, naming the backends that have one on
    // the problem's device; the CPU eager, batched_mm and grouped_mm share experts_backward.
    virtual void backward(const ExpertsProblem& problem, const TensorView& grad_out, const ExpertsGrads& grads,
                          const RunOptions& options) const;
    // Why run() cannot keep ExpertsSaved for this problem (nullopt: it can). Looks at shapes, dtypes and flags only,
    // never at tensor memory. The default: the backend keeps nothing.
    virtual std::optional<std::string> save_refusal(const ExpertsProblem& problem) const;

    // What every run() does first: the problem and `out` validated, then why_not() raised as Error(kUnsupported);
    // with options.saved, save_refusal() raised the same way and the views validated.
    void check_runnable(const ExpertsProblem& problem, const TensorView& out, const RunOptions& options = {}) const;
};

class ExpertsInterface {
   public:
    static ExpertsInterface& global();  // the built-in backends plus whatever users register
    void register_backend(std::shared_ptr<const Backend> backend);  // replaces a backend of the same name
    // Throws Error(kNotFound) "`x` is not a valid experts implementation; valid: eager, batched_mm, ..."
    const Backend& get(std::string_view name) const;
    const Backend* find(std::string_view name) const;
    std::vector<std::string> names() const;  // in registration order
    std::string valid_names_text() const;    // "eager, batched_mm, ..."
    // Runs `name` on the problem; errors if the backend cannot run it (with the reason).
    void run(std::string_view name, const ExpertsProblem& problem, const TensorView& out,
             const RunOptions& options = {}) const;
    // Backend `name`'s backward (Backend::backward).
    void backward(std::string_view name, const ExpertsProblem& problem, const TensorView& grad_out,
                  const ExpertsGrads& grads, const RunOptions& options = {}) const;
    // "eager, batched_mm, grouped_mm": the backends with a backward on `device` ("none yet" when there are none).
    std::string backward_names_text(Device device) const;

   private:
    std::vector<std::shared_ptr<const Backend>> backends_;
};

}  // namespace moex
