// Plain parameter types shared by the host launchers and the kernels of every experts pipeline: the gate of gated
// experts as one unit, the scales of quantized weights and the activation quantization. Types come from the public
// moex/ headers.
#pragma once

#include <cstdint>

#include "moex/activation.h"
#include "moex/dtype.h"
#include "moex/quant.h"

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

// Quantized weights W (E, rows, cols) as moex/quant.h stores them: e4m3 codes (kFp8) or two e2m1 codes per byte,
// the low nibble first (kMxfp4, kNvfp4). Weight (e, r, c) = code * scale[e, r >> row_shift, c >> col_shift]
// (* global[e] for nvfp4). Blocks are powers of two on CUDA (the host refuses others); a per-tensor scale has shifts
// of 62 and one block. format kNone: W is stored in the activation dtype and the rest is unused.
struct WeightScales {
    QuantFormat format = QuantFormat::kNone;
    const void* data = nullptr;  // (E, rows_b, cols_b): f32 | ue8m0 bytes (kUE8M0, kU8) | e4m3 bytes (nvfp4)
    DType dtype = DType::kF32;   // of data
    int32_t row_shift = 0, col_shift = 0;
    int32_t rows_b = 0, cols_b = 0;  // scale blocks per expert along rows and along cols
    const float* global = nullptr;   // nvfp4: (E,) f32, else nullptr
};
inline bool is_fp4(QuantFormat f) { return f == QuantFormat::kMxfp4 || f == QuantFormat::kNvfp4; }

// Activation quantization of quantized experts (moex/quant.h): each GEMM input row is rounded to e4m3 in groups of
// the projection's weight block along K (K for per-tensor weights; quant.cuh: promotion_group), with scale amax / 448
// per group (dynamic) or scale[e] of the row's expert (static), and back.
struct ActQuant {
    ActivationQuant mode = ActivationQuant::kNone;
    const float* up_scale = nullptr;  // static: (E,) f32
    const float* down_scale = nullptr;
};

}  // namespace moex::cuda
