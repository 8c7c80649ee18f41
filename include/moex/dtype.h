// Element types and devices of moex tensors, with exact scalar conversions for the 16-bit and 8-bit float formats.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace moex {

enum class DType : uint8_t { kBF16, kF16, kF32, kF64, kFP8E4M3, kUE8M0, kI32, kI64, kU8 };
enum class Device : uint8_t { kCPU, kCUDA };

constexpr int64_t dtype_size(DType t) {
    switch (t) {
        case DType::kBF16:
        case DType::kF16: return 2;
        case DType::kF32:
        case DType::kI32: return 4;
        case DType::kF64:
        case DType::kI64: return 8;
        case DType::kFP8E4M3:
        case DType::kUE8M0:
        case DType::kU8: return 1;
    }
    return 0;
}

// Names follow torch ("bfloat16", "float8_e4m3fn", ...); safetensors names are handled by the safetensors reader.
constexpr std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::kBF16: return "bfloat16";
        case DType::kF16: return "float16";
        case DType::kF32: return "float32";
        case DType::kF64: return "float64";
        case DType::kFP8E4M3: return "float8_e4m3fn";
        case DType::kUE8M0: return "float8_e8m0fnu";
        case DType::kI32: return "int32";
        case DType::kI64: return "int64";
        case DType::kU8: return "uint8";
    }
    return "?";
}

std::optional<DType> dtype_from_name(std::string_view name);  // accepts torch names and short ones ("bf16", "f32")

constexpr std::string_view device_name(Device d) { return d == Device::kCPU ? "cpu" : "cuda"; }
std::optional<Device> device_from_name(std::string_view name);

constexpr bool is_float_activation(DType t) { return t == DType::kBF16 || t == DType::kF16 || t == DType::kF32; }

// ---- scalar conversions (bit-exact, round-to-nearest-even) ----
inline float bits_to_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint32_t f32_to_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(uint32_t(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN, sign kept
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return bits_to_f32(sign);
        float v = float(man) * (1.0f / 16777216.0f);  // man * 2^-24
        return sign ? -v : v;
    }
    return bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
inline uint16_t f32_to_f16(float f) {
    uint32_t u = f32_to_bits(f), sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (a < 0x38800000u) {                                  // subnormal or zero in f16
        float v = bits_to_f32(a) * 16777216.0f;             // scale by 2^24, then round to integer (RNE)
        uint32_t m = uint32_t(v);
        float rem = v - float(m);
        if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
        return uint16_t(sign | m);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;  // rebias 127 -> 15, RNE on 13 dropped bits
    return uint16_t(sign | (r >> 13));
}

// fp8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no inf; 0x7f/0xff are NaN; max 448.
inline float fp8e4m3_to_f32(uint8_t b) {
    uint32_t sign = uint32_t(b & 0x80u) << 24, exp = (b >> 3) & 0xfu, man = b & 7u;
    if (exp == 0xf && man == 7) return bits_to_f32(sign | 0x7fc00000u);
    if (exp == 0) {
        float v = float(man) * (1.0f / 512.0f);  // man * 2^-9
        return sign ? -v : v;
    }
    return bits_to_f32(sign | ((exp + 120u) << 23) | (man << 20));
}
// ue8m0: an unsigned power of two 2^(b-127); 0xff is NaN.
inline float ue8m0_to_f32(uint8_t b) {
    if (b == 0xff) return bits_to_f32(0x7fc00000u);
    if (b == 0) return bits_to_f32(0x00400000u);  // 2^-127 is a float32 subnormal
    return bits_to_f32(uint32_t(b) << 23);
}

}  // namespace moex
