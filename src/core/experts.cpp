// ExpertsProblem validation: every check names the tensor, the dimension and the values that disagree.
#include "moex/experts.h"

#include <cmath>
#include <string>

#include "moex/error.h"

namespace moex {
namespace {

[[noreturn]] void bad(const std::string& msg) { fail(ErrorCode::kInvalidArgument, msg); }

void require_rank(const TensorView& t, const char* name, int rank) {
    if (!t.defined()) bad(std::string(name) + " is missing");
    if (t.ndim != rank)
        bad(std::string(name) + " must have " + std::to_string(rank) + " dimensions, got shape " + t.shape_string());
}

void require_shape(const TensorView& t, const char* name, std::initializer_list<int64_t> expect, const char* letters) {
    int d = 0;
    bool ok = true;
    for (int64_t e : expect) ok = ok && t.shape[d++] == e;
    if (ok) return;
    std::string want = "(";
    d = 0;
    for (int64_t e : expect) want += (d++ ? ", " : "") + std::to_string(e);
    bad(std::string(name) + " has shape " + t.shape_string() + ", expected " + want + ") = " + letters);
}

void require_dtype(const TensorView& t, const char* name, DType want) {
    if (t.dtype != want)
        bad(std::string(name) + " has dtype " + std::string(dtype_name(t.dtype)) + ", expected " +
            std::string(dtype_name(want)) + " (the dtype of hidden_states)");
}

// Unquantized weights are in the activation dtype; an 8-bit one hints at the quant description it lacks.
void require_weight_dtype(const TensorView& t, const char* name, DType want) {
    if (t.dtype == DType::kFP8E4M3 || t.dtype == DType::kU8)
        bad(std::string(name) + " has dtype " + std::string(dtype_name(t.dtype)) +
            " but the problem is not quantized: give its quant format (fp8_block | mxfp4 | nvfp4) and scales");
    require_dtype(t, name, want);
}

void require_same_device(const TensorView& t, const char* name, const TensorView& ref) {
    if (t.device != ref.device || t.device_index != ref.device_index)
        bad(std::string(name) + " is on " + std::string(device_name(t.device)) + ":" + std::to_string(t.device_index) +
            " but hidden_states is on " + std::string(device_name(ref.device)) + ":" +
            std::to_string(ref.device_index));
}

// Its bytes must fit in 64 bits: a view is only a claim about memory, and the kernels multiply its sizes.
void require_size_fits(const TensorView& t, const char* name) {
    int64_t n = dtype_size(t.dtype);
    for (int d = 0; d < t.ndim; ++d)
        if (t.shape[d] < 0 || __builtin_mul_overflow(n, t.shape[d], &n))
            fail(ErrorCode::kOverflow, std::string(name) + " has shape " + t.shape_string() +
                                           ", whose size in bytes does not fit in 64 bits");
}

void require_contiguous(const TensorView& t, const char* name) {
    if (t.defined() && !t.is_contiguous()) bad(std::string(name) + " must be contiguous (row-major)");
    if (t.defined() && t.data == nullptr && t.numel() > 0) bad(std::string(name) + " has a null data pointer");
}

}  // namespace

void validate_quantized(const ExpertsProblem& p);  // src/core/quant.cpp

std::string_view activation_name(Activation a) {
    switch (a) {
        case Activation::kSilu: return "silu";
        case Activation::kGelu: return "gelu";
        case Activation::kGeluTanh: return "gelu_pytorch_tanh";
        case Activation::kRelu: return "relu";
    }
    return "?";
}

std::optional<Activation> activation_from_name(std::string_view n) {
    if (n == "silu" || n == "swish") return Activation::kSilu;
    if (n == "gelu") return Activation::kGelu;
    if (n == "gelu_pytorch_tanh" || n == "gelu_new" || n == "gelu_tanh") return Activation::kGeluTanh;
    if (n == "relu") return Activation::kRelu;
    return std::nullopt;
}

std::string_view gate_kind_name(GateKind g) { return g == GateKind::kGptOss ? "gpt_oss" : "default"; }

std::optional<GateKind> gate_kind_from_name(std::string_view n) {
    if (n == "default") return GateKind::kDefault;
    if (n == "gpt_oss") return GateKind::kGptOss;
    return std::nullopt;
}

int64_t ExpertsProblem::I() const {
    if (!down_proj.defined() || down_proj.ndim != 3) return 0;
    if (is_transposed) return down_proj.shape[1];
    return quant.fp4() ? 2 * down_proj.shape[2] : down_proj.shape[2];  // FP4: two codes per byte along K
}

void ExpertsProblem::validate() const {
    require_rank(hidden_states, "hidden_states", 2);
    if (!is_float_activation(hidden_states.dtype))
        bad("hidden_states has dtype " + std::string(dtype_name(hidden_states.dtype)) +
            ", expected bfloat16, float16 or float32");
    const int64_t t = T(), h = H();
    if (h < 1) bad("hidden_states has hidden size 0");

    require_rank(top_k_index, "top_k_index", 2);
    if (top_k_index.dtype != DType::kI32 && top_k_index.dtype != DType::kI64)
        bad("top_k_index has dtype " + std::string(dtype_name(top_k_index.dtype)) + ", expected int32 or int64");
    if (top_k_index.shape[0] != t)
        bad("top_k_index has " + std::to_string(top_k_index.shape[0]) +
            " rows but hidden_states has T = " + std::to_string(t));
    require_rank(top_k_weights, "top_k_weights", 2);
    require_shape(top_k_weights, "top_k_weights", {t, k()}, "(T, k)");
    if (top_k_weights.dtype != DType::kF32 && top_k_weights.dtype != hidden_states.dtype)
        bad("top_k_weights has dtype " + std::string(dtype_name(top_k_weights.dtype)) +
            ", expected float32 or the dtype of hidden_states (" + std::string(dtype_name(hidden_states.dtype)) + ")");

    const char* up_name = has_gate ? "gate_up_proj" : "up_proj";
    require_rank(gate_up_proj, up_name, 3);
    require_rank(down_proj, "down_proj", 3);
    const int64_t e = E(), i = I();
    if (e < 1) bad(std::string(up_name) + " holds no experts (E = 0)");
    if (i < 1) bad("down_proj has intermediate size 0");
    const int64_t n = has_gate ? 2 * i : i;
    if (quant.enabled()) {
        validate_quantized(*this);  // weights' dtypes and shapes, scales, block divisibility (src/core/quant.cpp)
    } else {
        require_weight_dtype(gate_up_proj, up_name, hidden_states.dtype);
        require_weight_dtype(down_proj, "down_proj", hidden_states.dtype);
        if (is_transposed) {
            require_shape(gate_up_proj, up_name, {e, h, n},
                          has_gate ? "(E, H, 2I) (transposed)" : "(E, H, I) (transposed)");
            require_shape(down_proj, "down_proj", {e, i, h}, "(E, I, H) (transposed)");
        } else {
            require_shape(gate_up_proj, up_name, {e, n, h}, has_gate ? "(E, 2I, H)" : "(E, I, H)");
            require_shape(down_proj, "down_proj", {e, h, i}, "(E, H, I)");
        }
    }
    if (gate_up_bias.defined()) {
        require_rank(gate_up_bias, has_gate ? "gate_up_proj_bias" : "up_proj_bias", 2);
        require_shape(gate_up_bias, has_gate ? "gate_up_proj_bias" : "up_proj_bias", {e, n},
                      has_gate ? "(E, 2I)" : "(E, I)");
        require_dtype(gate_up_bias, "gate_up_proj_bias", hidden_states.dtype);
    }
    if (down_bias.defined()) {
        require_rank(down_bias, "down_proj_bias", 2);
        require_shape(down_bias, "down_proj_bias", {e, h}, "(E, H)");
        require_dtype(down_bias, "down_proj_bias", hidden_states.dtype);
    }
    if (!has_gate && !is_concatenated) bad("is_concatenated=false (interleaved gate/up) requires has_gate=true");
    if (!has_gate && gate == GateKind::kGptOss) bad("the gpt_oss gate requires has_gate=true");
    if (gate == GateKind::kGptOss &&
        (!std::isfinite(swiglu_alpha) || !std::isfinite(swiglu_limit) || swiglu_limit <= 0))
        bad("gpt_oss gate needs a finite swiglu_alpha and a positive finite swiglu_limit");

    const struct {
        const TensorView* t;
        const char* name;
    } all[] = {{&hidden_states, "hidden_states"}, {&top_k_index, "top_k_index"}, {&top_k_weights, "top_k_weights"},
               {&gate_up_proj, up_name},          {&down_proj, "down_proj"},     {&gate_up_bias, "gate_up_proj_bias"},
               {&down_bias, "down_proj_bias"}};
    for (const auto& a : all) {
        if (!a.t->defined()) continue;
        require_size_fits(*a.t, a.name);
        require_same_device(*a.t, a.name, hidden_states);
        require_contiguous(*a.t, a.name);
    }
    // The routed rows (S = T k of them) in f32 at the widest of H and N, what the kernels size workspaces by.
    int64_t routed = 4;
    if (__builtin_mul_overflow(routed, t, &routed) || __builtin_mul_overflow(routed, k(), &routed) ||
        __builtin_mul_overflow(routed, h > n ? h : n, &routed))
        fail(ErrorCode::kOverflow, "T * k * max(H, N) = " + std::to_string(t) + " * " + std::to_string(k()) + " * " +
                                       std::to_string(h > n ? h : n) + " routed values do not fit in 64-bit sizes");
}

void ExpertsProblem::validate_output(const TensorView& out) const {
    require_rank(out, "out", 2);
    require_shape(out, "out", {T(), H()}, "(T, H)");
    require_dtype(out, "out", hidden_states.dtype);
    require_same_device(out, "out", hidden_states);
    require_contiguous(out, "out");
}

}  // namespace moex
