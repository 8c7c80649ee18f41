// Quantized experts weights as transformers' FP8Experts (and the FP4 exports) hold them, and the exact scalar codecs
// of their number formats. A quantized problem keeps gate_up_proj / down_proj in (E, N, K) storage (never
// transposed) and adds, per projection, the scale companions below; the value of weight (e, n, k) is
//   fp8   : e4m3(q) * scale_inv[e, n / block_n, k / block_k]            (block 0 x 0: scale_inv[e, 0, 0])
//   mxfp4 : e2m1(q) * 2^(scale[e, n, k / 32] - 127)                        (q packed two per byte, low nibble = even k)
//   nvfp4 : e2m1(q) * e4m3(scale[e, n, k / 16]) * global_scale[e]
// Activations: kDynamic quantizes each (row, block_k group) of the GEMM input to e4m3 with an f32 scale amax / 448
// (the whole row when the weights are per-tensor), each value as e4m3(x * (448 / amax)) in f32 (one division per
// group, the inverse capped at FLT_MAX; an all-zero group stays zero), kStatic divides by activation_scale[e] and
// clamps to +-448,
// kNone feeds them as they are (weight-only; the only scheme for FP4 weights). Quantization is then undone in f32, so
// the products are those of an FP8 x FP8 GEMM with f32 accumulation, up to the order of the f32 sums.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

#include "moex/dtype.h"
#include "moex/tensor.h"

namespace moex {

struct ExpertsProblem;

enum class QuantFormat : uint8_t { kNone, kFp8, kMxfp4, kNvfp4 };
enum class ActivationQuant : uint8_t { kNone, kDynamic, kStatic };

// The companions of one quantized projection (weights (E, N, K): gate_up N = 2I or I, K = H; down N = H, K = I).
struct ProjectionQuant {
    // fp8: (E, max(N / block_n, 2 for gate_up of gated experts), K / block_k) f32 | ue8m0, per-tensor (E, 1, 1);
    // mxfp4: (E, N, K / 32) ue8m0 (uint8 bytes are read as ue8m0); nvfp4: (E, N, K / 16) e4m3.
    TensorView scale_inv;
    TensorView global_scale;      // nvfp4 only: (E,) f32, modelopt's weight_scale_2
    TensorView activation_scale;  // kStatic only: (E,) f32
};

struct ExpertsQuant {
    QuantFormat format = QuantFormat::kNone;
    int64_t block_n = 128, block_k = 128;  // fp8 weight_block_size; 0 x 0 = one scale per expert (per-tensor)
    ActivationQuant activations = ActivationQuant::kDynamic;
    ProjectionQuant gate_up, down;

    bool enabled() const { return format != QuantFormat::kNone; }
    bool fp4() const { return format == QuantFormat::kMxfp4 || format == QuantFormat::kNvfp4; }
    // Elements of K per stored byte: 2 for FP4, 1 for FP8.
    int64_t per_byte() const { return fp4() ? 2 : 1; }
    // Elements along K that share one weight scale: block_k (fp8; 0 = all of K), 32 (mxfp4), 16 (nvfp4).
    int64_t group_k() const {
        return format == QuantFormat::kMxfp4 ? 32 : format == QuantFormat::kNvfp4 ? 16 : block_k;
    }
};

// "fp8_block", "mxfp4", "nvfp4" (and "none"); the names of problem files and of `moex experts make-problem --quant`.
std::string_view quant_format_name(QuantFormat f);
std::optional<QuantFormat> quant_format_from_name(std::string_view name);  // also accepts "fp8"
std::string_view activation_quant_name(ActivationQuant a);                 // "none", "dynamic", "static"
std::optional<ActivationQuant> activation_quant_from_name(std::string_view name);
// "128x128" (block_n x block_k, each 1..2^20) or "none" (0 x 0, per-tensor); nullopt for anything else.
struct WeightBlock {
    int64_t n, k;
};
std::optional<WeightBlock> weight_block_from_name(std::string_view name);

// ---- exact scalar codecs ----

// e2m1 code (low 4 bits: sign bit 3, magnitude index into {0, .5, 1, 1.5, 2, 3, 4, 6}).
inline float fp4e2m1_to_f32(uint8_t code) {
    constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float m = kMag[code & 7u];
    return (code & 8u) ? -m : m;
}

// The dynamic activation scale's inverse 448 / amax (amax > 0), capped at FLT_MAX so that a subnormal amax gives
// finite codes (x * inv, never 0 * inf). Every backend and the tests' reference quantize with it.
inline float dynamic_inverse(float amax) { return std::fmin(448.0f / amax, 3.40282347e38f); }

// Round-to-nearest-even into e4m3fn, saturating at +-448 (the range transformers clamps to before its casts);
// NaN stays NaN (0x7f with the sign).
inline uint8_t f32_to_fp8e4m3(float f) {
    const uint32_t u = f32_to_bits(f), sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint8_t(sign | 0x7fu);
    if (a >= 0x43e00000u) return uint8_t(sign | 0x7eu);  // >= 448 (and inf): the largest finite value
    if (a < 0x3c800000u) {                               // below 2^-6: subnormal steps of 2^-9
        const float v = bits_to_f32(a) * 512.0f;         // exact
        uint32_t q = uint32_t(v);
        const float rem = v - float(q);
        if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;  // q = 8 is the smallest normal, 0x08
        return uint8_t(sign | q);
    }
    const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);  // RNE on the 20 dropped mantissa bits
    const uint32_t b = (((r >> 23) - 120u) << 3) | ((r >> 20) & 7u);
    return uint8_t(sign | (b > 0x7eu ? 0x7eu : b));
}

// Round-to-nearest-even into e2m1 (ties to the even code), saturating at +-6.
inline uint8_t f32_to_fp4e2m1(float f) {
    const uint8_t sign = std::signbit(f) ? 8 : 0;
    const float a = std::fabs(f);
    if (std::isnan(f)) return sign | 7;  // e2m1 has no NaN: the largest magnitude (callers never pass NaN)
    constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    uint8_t best = 7;
    for (uint8_t c = 0; c < 7; ++c) {
        const float mid = 0.5f * (kMag[c] + kMag[c + 1]);
        if (a < mid || (a == mid && (c & 1u) == 0)) {
            best = c;
            break;
        }
    }
    return sign | best;
}

// The smallest power of two >= v (v > 0, finite) as a ue8m0 byte, clamped to the format's range [2^-127, 2^127].
inline uint8_t ue8m0_ceil(float v) {
    int e = 0;
    const float m = std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1)
    int p = m == 0.5f ? e - 1 : e;
    p = p < -127 ? -127 : p > 127 ? 127 : p;
    return uint8_t(p + 127);
}

// ---- quantizing weights (problem files, tests, benchmarks) ----

// Weights (E, N, K) in bf16 | f16 | f32 quantized the way transformers' quantizers write them:
//   fp8: per (block_n x block_k) block scale_inv = amax / 448 (ue8m0: rounded up to a power of two), q = e4m3(w / s);
//   mxfp4: per 32 along K, s = 2^ceil(log2(amax / 6)), q = e2m1(w / s);
//   nvfp4: global = amax(expert) / (448 * 6), per 16 along K s = e4m3(amax / (6 * global)), q = e2m1(w / (s * g)).
// An all-zero block gets scale 1. Errors name the dimension the block does not divide.
struct QuantizedWeights {
    Tensor weights;       // (E, N, K) e4m3, or (E, N, K / 2) uint8 for FP4
    Tensor scale_inv;     // see ProjectionQuant
    Tensor global_scale;  // nvfp4: (E,) f32
};
QuantizedWeights quantize_weights(const TensorView& w, QuantFormat format, int64_t block_n = 128, int64_t block_k = 128,
                                  DType scale_dtype = DType::kF32, int64_t min_scale_rows = 1);

// Both projections of p (gate_up_proj, down_proj; (E, N, K), not transposed) quantized by quantize_weights, gated
// experts' gate_up scales keeping a row per half: p's weights and p.quant (format, block, scales, global scales)
// then point into the result, which must outlive p's use. p.quant.activations and static scales stay the caller's.
struct QuantizedExperts {
    QuantizedWeights gate_up, down;
};
QuantizedExperts quantize_experts(ExpertsProblem& p, QuantFormat format, int64_t block_n = 128, int64_t block_k = 128,
                                  DType scale_dtype = DType::kF32);

}  // namespace moex
