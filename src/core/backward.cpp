// The backward's checks (grad_out and every gradient view against the input it belongs to) and its dispatch: CPU
// tensors go to the shared CPU backward, CUDA ones to the shared CUDA backward (src/backends/cuda_bridge.h).
#include "moex/backward.h"

#include <string>

#include "moex/backend.h"
#include "moex/error.h"
#include "src/backends/cuda_bridge.h"
#include "src/cpu/backward.h"

namespace moex {
namespace {

[[noreturn]] void bad(const std::string& msg) { fail(ErrorCode::kInvalidArgument, msg); }

// A gradient (or grad_out) must look like `like` (shape, dtype, device) and be contiguous with data.
void require_like(const TensorView& g, const char* name, const TensorView& like, const char* like_name) {
    if (g.ndim != like.ndim)
        bad(std::string(name) + " has shape " + g.shape_string() + ", expected " + like_name + "'s " +
            like.shape_string());
    for (int d = 0; d < g.ndim; ++d)
        if (g.shape[d] != like.shape[d])
            bad(std::string(name) + " has shape " + g.shape_string() + ", expected " + like_name + "'s " +
                like.shape_string());
    if (g.dtype != like.dtype)
        bad(std::string(name) + " has dtype " + std::string(dtype_name(g.dtype)) + ", expected " + like_name + "'s " +
            std::string(dtype_name(like.dtype)));
    if (g.device != like.device || g.device_index != like.device_index)
        bad(std::string(name) + " is on " + std::string(device_name(g.device)) + ":" + std::to_string(g.device_index) +
            " but " + like_name + " is on " + std::string(device_name(like.device)) + ":" +
            std::to_string(like.device_index));
    if (g.numel() > 0 && !g.is_contiguous())
        bad(std::string(name) + " must be contiguous (row-major)");  // empty: any strides
    if (g.data == nullptr && g.numel() > 0) bad(std::string(name) + " has a null data pointer");
}

}  // namespace

void validate_backward(const ExpertsProblem& p, const TensorView& grad_out, const ExpertsGrads& g) {
    if (p.quant.enabled())
        fail(ErrorCode::kUnsupported, "experts backward: the expert weights are quantized (" +
                                          std::string(quant_format_name(p.quant.format)) +
                                          "), and FP8 / FP4 codes have no gradient; dequantize them to train");
    p.validate();
    if (!grad_out.defined()) bad("grad_out is missing");
    if (grad_out.ndim != 2 || grad_out.shape[0] != p.T() || grad_out.shape[1] != p.H())
        bad("grad_out has shape " + grad_out.shape_string() + ", expected (T, H) = (" + std::to_string(p.T()) + ", " +
            std::to_string(p.H()) + ")");
    require_like(grad_out, "grad_out", p.hidden_states, "hidden_states");
    const char* up = p.has_gate ? "gate_up_proj" : "up_proj";
    const struct {
        const TensorView* grad;
        const char* name;
        const TensorView* input;
        const char* input_name;
    } all[] = {{&g.hidden_states, "grad hidden_states", &p.hidden_states, "hidden_states"},
               {&g.top_k_weights, "grad top_k_weights", &p.top_k_weights, "top_k_weights"},
               {&g.gate_up_proj, "grad gate_up_proj", &p.gate_up_proj, up},
               {&g.down_proj, "grad down_proj", &p.down_proj, "down_proj"},
               {&g.gate_up_bias, "grad gate_up_proj_bias", &p.gate_up_bias, "gate_up_proj_bias"},
               {&g.down_bias, "grad down_proj_bias", &p.down_bias, "down_proj_bias"}};
    for (const auto& a : all) {
        if (!a.grad->defined()) continue;
        if (!a.input->defined()) bad(std::string(a.name) + " is given but the problem has no " + a.input_name);
        require_like(*a.grad, a.name, *a.input, a.input_name);
    }
}

void validate_saved(const ExpertsProblem& p, const ExpertsSaved& s) {
    const int64_t S = p.T() * p.k(), N = p.up_width();
    const auto check = [&](const TensorView& v, const char* name, DType dtype, int ndim, int64_t cols) {
        const std::string want = ndim == 2 ? "(T*k, N) = (" + std::to_string(S) + ", " + std::to_string(N) + ")"
                                           : "(T*k,) = (" + std::to_string(S) + ",)";
        if (!v.defined()) bad(std::string("saved ") + name + " is missing (the two saved views come together)");
        if (v.ndim != ndim || v.shape[0] != S || (ndim == 2 && v.shape[1] != cols))
            bad(std::string("saved ") + name + " has shape " + v.shape_string() + ", expected " + want);
        if (v.dtype != dtype)
            bad(std::string("saved ") + name + " has dtype " + std::string(dtype_name(v.dtype)) + ", expected " +
                std::string(dtype_name(dtype)));
        if (v.device != p.device() || v.device_index != p.hidden_states.device_index)
            bad(std::string("saved ") + name + " is not on hidden_states' device");
        if (v.numel() > 0 && (!v.is_contiguous() || v.data == nullptr))
            bad(std::string("saved ") + name + " must be contiguous (row-major) with data");
    };
    check(s.gate_up, "gate_up", p.dtype(), 2, N);
    check(s.slot_row, "slot_row", DType::kI32, 1, 0);
}

void experts_backward(const ExpertsProblem& p, const TensorView& grad_out, const ExpertsGrads& grads, int num_threads,
                      void* cuda_stream, const ExpertsSaved* saved) {
    validate_backward(p, grad_out, grads);
    if (saved) validate_saved(p, *saved);
    switch (p.device()) {
        case Device::kCPU: return cpu::run_backward(p, grad_out, grads, num_threads);
        case Device::kCUDA: return backends::run_cuda_backward(p, grad_out, grads, cuda_stream, saved);
    }
    fail(ErrorCode::kUnsupported, "experts backward on " + std::string(device_name(p.device())) +
                                      " tensors: backends with a backward on cpu: " +
                                      ExpertsInterface::global().backward_names_text(Device::kCPU));
}

}  // namespace moex
