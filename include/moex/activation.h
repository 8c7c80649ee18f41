// The gate vocabulary of gated experts, shared by the public API and the CUDA kernels (no TensorView, no CUDA here):
// the activation of act(gate) * up (or of the ungated act(up)), and the gate kind (the default, or gpt-oss's).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace moex {

enum class Activation : uint8_t { kSilu, kGelu, kGeluTanh, kRelu };  // gelu: erf form; kGeluTanh: tanh approximation
enum class GateKind : uint8_t { kDefault, kGptOss };                 // kDefault: act(gate)*up; kGptOss: clamped SwiGLU

std::string_view activation_name(Activation a);  // "silu", "gelu", "gelu_pytorch_tanh", "relu"
std::optional<Activation> activation_from_name(std::string_view name);
std::string_view gate_kind_name(GateKind g);  // "default", "gpt_oss"
std::optional<GateKind> gate_kind_from_name(std::string_view name);

}  // namespace moex
