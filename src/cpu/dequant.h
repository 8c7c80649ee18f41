// The portable scalar dequantization of one quantized weight (the scalar kernel table and the AVX2 tails use it):
// code(n, k) * (scale(n, k) * global), the product the vector kernels round the same way.
#pragma once

#include <cstdint>

#include "moex/quant.h"
#include "src/cpu/problem.h"

namespace moex::cpu {

// scale(n, k) of a quantized WeightMat as f32 (exact), without the global.
inline float block_scale(const WeightQuant& q, int64_t n, int64_t k) {
    const int64_t i = ((q.row0 + n) / q.bn) * q.ld + k / q.bk;
    switch (q.scale_dtype) {
        case DType::kF32: return static_cast<const float*>(q.scale)[i];
        case DType::kFP8E4M3: return fp8e4m3_to_f32(static_cast<const uint8_t*>(q.scale)[i]);
        default: return ue8m0_to_f32(static_cast<const uint8_t*>(q.scale)[i]);  // kUE8M0 | kU8 bytes
    }
}

// scale(n, k) * global of a quantized WeightMat, rounded once to f32.
inline float quant_scale(const WeightQuant& q, int64_t n, int64_t k) { return block_scale(q, n, k) * q.global; }

// The f32 value of quantized element (n, k).
inline float quant_elem(const WeightMat& b, int64_t n, int64_t k) {
    const auto* row = static_cast<const uint8_t*>(b.data) + n * b.ld;
    const float code = b.q.format == QuantFormat::kFp8 ? fp8e4m3_to_f32(row[k])
                                                       : fp4e2m1_to_f32((k & 1) ? row[k / 2] >> 4 : row[k / 2] & 15u);
    return code * quant_scale(b.q, n, k);
}

}  // namespace moex::cpu
