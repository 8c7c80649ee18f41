// ExpertsProblem: one experts call of the Hugging Face contract,
//   out[t] = sum_j w[t,j] * f_{e(t,j)}(x[t]),  f_e(x) = down_e(gate(gate_up_e x + b_gu)) + b_d,
// with every layout variant of the reference (stacked or interleaved gate/up, transposed weights, biases,
// custom gates, ungated experts), in the activation dtype or quantized (FP8 blocks, MXFP4, NVFP4; moex/quant.h). Ids
// outside [0, E) contribute exactly zero and are never used as an index.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "moex/activation.h"
#include "moex/quant.h"
#include "moex/tensor.h"

namespace moex {

struct ExpertsProblem {
    TensorView hidden_states;  // (T, H)           bf16 | f16 | f32
    TensorView top_k_index;    // (T, k)           i32 | i64
    TensorView top_k_weights;  // (T, k)           f32 | dtype of hidden_states
    // has_gate: gate_up_proj (E, 2I, H), transposed (E, H, 2I); ungated: up_proj (E, I, H), transposed (E, H, I).
    TensorView gate_up_proj;
    TensorView down_proj;     // (E, H, I), transposed (E, I, H)
    TensorView gate_up_bias;  // optional: (E, 2I), ungated (E, I)
    TensorView down_bias;     // optional: (E, H)

    bool has_gate = true;
    bool is_transposed = false;
    bool is_concatenated = true;  // true: columns [gate | up]; false: interleaved [g0, u0, g1, u1, ...]
    Activation activation = Activation::kSilu;
    GateKind gate = GateKind::kDefault;
    float swiglu_alpha = 1.702f;  // kGptOss: out = (clamp(up,-l,l) + 1) * g * sigmoid(alpha g), g = min(gate, l)
    float swiglu_limit = 7.0f;
    // Quantized weights (moex/quant.h): gate_up_proj / down_proj hold e4m3 or packed e2m1 codes, quant the scales.
    ExpertsQuant quant;

    int64_t T() const { return hidden_states.shape[0]; }
    int64_t H() const { return hidden_states.shape[1]; }
    int64_t k() const { return top_k_index.shape[1]; }
    int64_t E() const { return gate_up_proj.shape[0]; }
    int64_t I() const;  // intermediate size (per half when gated)
    int64_t up_width() const { return has_gate ? 2 * I() : I(); }
    DType dtype() const { return hidden_states.dtype; }
    Device device() const { return hidden_states.device; }

    // Throws moex::Error naming the first tensor, dimension or flag that breaks the contract.
    void validate() const;
    // The output must be (T, H) in the dtype of hidden_states on the same device.
    void validate_output(const TensorView& out) const;
};

// Reads element (t, j) of top_k_index whatever its dtype.
inline int64_t expert_id(const TensorView& idx, int64_t t, int64_t j) {
    const int64_t off = t * idx.strides[0] + j * idx.strides[1];
    return idx.dtype == DType::kI64 ? static_cast<const int64_t*>(idx.data)[off]
                                    : static_cast<const int32_t*>(idx.data)[off];
}

}  // namespace moex
