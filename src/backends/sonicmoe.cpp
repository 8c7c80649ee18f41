// The `sonicmoe` backend: fused bf16 gated experts (SwiGLU / GeGLU / ReGLU) on Hopper (CUDA only, sm_90).
// Unlike the reference, which silently maps unknown activations to SwiGLU and ignores custom gates, moex refuses them.
#include "moex/error.h"
#include "src/backends/builtin.h"
#include "src/backends/cuda_args.h"

namespace moex::backends {
namespace {

class SonicMoe final : public Backend {
   public:
    std::string_view name() const override { return "sonicmoe"; }
    std::string_view description() const override {
        return "Fused gated-experts forward (dispatch, up+gate, down, combine) for bf16 experts on Hopper.";
    }
    std::vector<Device> devices() const override { return {Device::kCUDA}; }
    std::vector<DType> dtypes() const override { return {DType::kBF16}; }
    std::optional<std::string> unavailable(Device device) const override {
        if (device != Device::kCUDA) return std::string("sonicmoe is not supported on CPU (CUDA only)");
        return cuda_unavailable();
    }
    std::optional<std::string> why_not(const ExpertsProblem& p) const override {
        if (auto why = unavailable(p.device())) return why;
        if (!p.has_gate) return std::string("sonicmoe requires gated experts (has_gate=true)");
        if (p.gate != GateKind::kDefault)
            return std::string("sonicmoe supports act(gate)*up gates only, not the gpt_oss clamped SwiGLU");
        if (p.activation == Activation::kGeluTanh)
            return std::string("sonicmoe supports silu, gelu and relu gates, not gelu_pytorch_tanh");
        if (p.dtype() != DType::kBF16)
            return "sonicmoe requires bfloat16 experts, got " + std::string(dtype_name(p.dtype()));
        return std::nullopt;
    }
    void run(const ExpertsProblem& p, const TensorView& out, const RunOptions& options) const override {
        check_runnable(*this, p, out);
        if (p.T() == 0) return;
        run_cuda(p, out, CudaAlgo::kGrouped, options);
    }
};

}  // namespace

std::shared_ptr<const Backend> make_sonicmoe() { return std::make_shared<SonicMoe>(); }

}  // namespace moex::backends
