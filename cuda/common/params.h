// Plain parameter types shared by the host launchers and the kernels of every experts pipeline: the gate of gated
// experts as one unit, and the block scales of quantized weights. Types come from the public moex/ headers.
#pragma once

#include <cstdint>

#include "moex/activation.h"
#include "moex/dtype.h"

namespace moex::cuda {

// The gate, filled once from the ExpertsProblem (src/backends/cuda_bridge.cpp) and passed whole to every launcher.
//   kDefault: h = act(g) * u            kGptOss: g' = min(g, limit), u' = clamp(u, -limit, limit),
//                                                h = (u' + 1) * g' * sigmoid(alpha * g')
// Ungated experts use `activation` alone: h = act(u).
struct GateParams {
    Activation activation;
    GateKind kind;
    bool concatenated;  // up-projection columns [gate | up]; false: interleaved [g0, u0, g1, u1, ...]
    float alpha, limit;
};

// Block scales of quantized weights W (E, rows, cols): scale[e, r / block_rows, c / block_cols] multiplies the
// dequantized block. No CUDA kernel takes quantized weights yet: `data == nullptr` and the weight dtype equal to the
// activation dtype is the only accepted state (run_experts refuses the rest), so FP8 and FP4 add kernels, not a new
// description of the call.
struct WeightScales {
    const void* data = nullptr;  // (E, ceil(rows / block_rows), ceil(cols / block_cols)) scale_dtype, or nullptr
    DType dtype = DType::kF32;   // kF32 | kUE8M0 (a power of two 2^(b-127))
    int32_t block_rows = 0, block_cols = 0;
};

}  // namespace moex::cuda
