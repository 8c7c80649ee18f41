// Scalar e4m3 / ue8m0 / e2m1 decoders and the weight-scale read of the SIMD kernel files (*_avx2.cpp,
// *_avx512.cpp). Internal linkage on purpose: each including file compiles its own copy with its own ISA flags, so
// the linker can never pick an AVX-512 build of one of them for code that runs on a CPU without AVX-512 (the trap an
// inline function shared with portable code would set).
#pragma once

#include <cstdint>
#include <cstring>

#include "src/cpu/kernels.h"

namespace moex::cpu {
namespace {

inline float bits_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline float e4m3_value(uint8_t b) {
    const uint32_t sign = uint32_t(b & 0x80u) << 24, exp = (b >> 3) & 0xfu, man = b & 7u;
    if (exp == 0xf && man == 7) return bits_f32(sign | 0x7fc00000u);
    if (exp == 0) {
        const float v = float(man) * (1.0f / 512.0f);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 120u) << 23) | (man << 20));
}

inline float ue8m0_value(uint8_t b) {
    if (b == 0xff) return bits_f32(0x7fc00000u);
    if (b == 0) return bits_f32(0x00400000u);
    return bits_f32(uint32_t(b) << 23);
}

inline float e2m1_value(uint8_t c) {
    constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return (c & 8u) ? -kMag[c & 7u] : kMag[c & 7u];
}

// Scale (srow, g) * global; i = srow * ld + g is computed by the caller without a division per group.
inline float group_scale(const WeightQuant& q, int64_t i) {
    float s;
    switch (q.scale_dtype) {
        case DType::kF32: s = static_cast<const float*>(q.scale)[i]; break;
        case DType::kFP8E4M3: s = e4m3_value(static_cast<const uint8_t*>(q.scale)[i]); break;
        default: s = ue8m0_value(static_cast<const uint8_t*>(q.scale)[i]); break;
    }
    return s * q.global;
}

}  // namespace
}  // namespace moex::cpu
