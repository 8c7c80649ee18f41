// Device side of quantized weights and activations (params.h: WeightScales, ActQuant): the exact e4m3 / e2m1 /
// ue8m0 decoders, a weight's scale split into the part folded into the MMA operand and the part promoted onto the
// f32 partial sums, and the decoders of the load paths. Encoding (activations): RNE with saturation at +-448, as
// moex/quant.h's f32_to_fp8e4m3.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/common/params.h"

namespace moex::cuda {

__device__ __forceinline__ float e4m3_to_f32(uint32_t code) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code & 0xffu), __NV_E4M3);
    return __half2float(__half(h));
}
// Two e4m3 codes (the low 16 bits of `codes`) -> two floats, one cvt.
__device__ __forceinline__ float2 e4m3x2_to_f32(uint32_t codes) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xffffu), __NV_E4M3);
    return __half22float2(__half2(h));
}
__device__ __forceinline__ uint8_t f32_to_e4m3(float v) {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}
// Two values to two e4m3 codes (x the low byte), one conversion.
__device__ __forceinline__ uint16_t f32x2_to_e4m3x2(float x, float y) {
    return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(x, y), __NV_SATFINITE, __NV_E4M3));
}
// Dynamic activation quantization (moex/quant.h dynamic_inverse): a value's code is e4m3(v * (448 / amax)), the
// inverse capped at FLT_MAX; the scale stored beside the codes is amax / 448.
__device__ __forceinline__ float dynamic_inverse(float amax) { return fminf(__fdiv_rn(448.0f, amax), 3.40282347e38f); }
// e2m1 (low 4 bits: sign bit 3, magnitude {0, .5, 1, 1.5, 2, 3, 4, 6}): magnitudes >= 1 are 2^(e-1) (1 + m/2), which
// is the f32 with exponent field 126 + e and mantissa m << 22, i.e. (code & 7) << 22 plus 126 << 23.
__device__ __forceinline__ float e2m1_to_f32(uint32_t code) {
    const uint32_t m = code & 7u;
    const float mag = m >= 2u ? __uint_as_float((m << 22) + (126u << 23)) : 0.5f * static_cast<float>(m);
    return (code & 8u) ? -mag : mag;
}
__device__ __forceinline__ float ue8m0_to_f32(uint32_t b) {
    b &= 0xffu;
    // 2^(b - 127): the f32 with exponent field b; b = 0 is 2^-127 (subnormal), 255 is NaN (as moex/dtype.h).
    return b == 0u ? __uint_as_float(0x00400000u) : b == 255u ? __uint_as_float(0x7fc00000u) : __uint_as_float(b << 23);
}

// Index into s.data of the block of weight (e, r, c).
__device__ __forceinline__ int64_t scale_index(const WeightScales& s, int64_t e, int64_t r, int64_t c) {
    return (e * s.rows_b + (r >> s.row_shift)) * s.cols_b + (c >> s.col_shift);
}

// The stored word of weight (e, r, c)'s block scale (f32 bits, or the e4m3 / ue8m0 byte) and its value: split so a
// kernel can load the word early and decode it where it is used, with nothing waiting on the load in between.
__device__ __forceinline__ uint32_t scale_word_at(const WeightScales& s, int64_t i) {
    return s.dtype == DType::kF32 ? static_cast<const uint32_t*>(s.data)[i] : static_cast<const uint8_t*>(s.data)[i];
}
__device__ __forceinline__ uint32_t weight_scale_word(const WeightScales& s, int64_t e, int64_t r, int64_t c) {
    return scale_word_at(s, scale_index(s, e, r, c));
}
__device__ __forceinline__ float decode_scale_word(const WeightScales& s, uint32_t w) {
    return s.dtype == DType::kF32 ? __uint_as_float(w) : s.dtype == DType::kFP8E4M3 ? e4m3_to_f32(w) : ue8m0_to_f32(w);
}

// scale(e, r, c) * global[e] of quantized weight (e, r, c).
__device__ __forceinline__ float weight_scale(const WeightScales& s, int64_t e, int64_t r, int64_t c) {
    const float v = decode_scale_word(s, weight_scale_word(s, e, r, c));
    return s.global != nullptr ? v * s.global[e] : v;
}

// 16-bit kernels keep every operand exact: a weight enters the MMA as code * fold_scale (exact in bf16 and f16:
// an e4m3 or e2m1 code, times a power of two (mxfp4) or an e4m3 scale (nvfp4)), and the rest of its scale,
// promo_scale, multiplies the f32 partial sums of each k_group slice (promotion, as DeepGEMM does for FP8):
//   fp8: fold 1, promo scale_inv[e, r / bn, c / bk], k_group = bk (K when per-tensor);
//   mxfp4: fold 2^(s - 127), promo 1; nvfp4: fold e4m3(s), promo global[e]; k_group = K.
__device__ __forceinline__ float fold_scale(const WeightScales& s, int64_t e, int64_t r, int64_t c) {
    if (s.format == QuantFormat::kFp8) return 1.0f;
    const uint32_t b = static_cast<const uint8_t*>(s.data)[scale_index(s, e, r, c)];
    return s.format == QuantFormat::kNvfp4 ? e4m3_to_f32(b) : ue8m0_to_f32(b);
}
// promo_scale from a scale word loaded ahead (fp8: weight_scale_word of the weight's block; fp4: the word is unused).
__device__ __forceinline__ float promo_scale_of_word(const WeightScales& s, int64_t e, uint32_t w) {
    const float v = s.format == QuantFormat::kFp8 ? decode_scale_word(s, w) : 1.0f;
    return s.global != nullptr ? v * s.global[e] : v;
}
__device__ __forceinline__ float promo_scale(const WeightScales& s, int64_t e, int64_t r, int64_t c) {
    return promo_scale_of_word(s, e, s.format == QuantFormat::kFp8 ? weight_scale_word(s, e, r, c) : 0u);
}

// Four e4m3 codes (one 32-bit word, lowest byte first) and eight e2m1 codes (one word, lowest nibble first),
// the e2m1 ones times their fold scale `sc`, in f32.
__device__ __forceinline__ void e4m3x4_to_f32(uint32_t w, float* v) {
    const float2 a = e4m3x2_to_f32(w), b = e4m3x2_to_f32(w >> 16);
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
}
__device__ __forceinline__ void e2m1x8_to_f32(uint32_t w, float sc, float* v) {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = e2m1_to_f32(w >> (4 * i)) * sc;
}

// Eight e2m1 codes (one word, lowest nibble first) times `fold` as four bf16 pairs, with integer ops and two bf16x2
// multiplies instead of eight float decodes and four packs: a code's sign and 3 magnitude bits placed as a bf16's
// sign, 2 low exponent bits and top mantissa bit give code * 2^-126 exactly (magnitude 1 (0.5) is the subnormal
// 2^-127), so * 2^126 is the code and * fold rounds code * fold once, as the float path's single rounding does.
__device__ __forceinline__ uint4 e2m1x8_to_bf16(uint32_t w, __nv_bfloat162 fold) {
    const __nv_bfloat162 unbias = __floats2bfloat162_rn(0x1p126f, 0x1p126f);
    uint32_t r[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint32_t b = w >> (8 * j);  // codes 2j (bits 0-3) and 2j + 1 (bits 4-7)
        uint32_t bits = ((b & 0x7u) << 6) | ((b & 0x8u) << 12) | ((b & 0x70u) << 18) | ((b & 0x80u) << 24);
        __nv_bfloat162 v = __hmul2(__hmul2(*reinterpret_cast<__nv_bfloat162*>(&bits), unbias), fold);
        r[j] = *reinterpret_cast<uint32_t*>(&v);
    }
    return {r[0], r[1], r[2], r[3]};
}

// Eight weights (e, r, c0 .. c0 + 7) of the K-major row `row` (bytes of expert e, row r) as code * fold_scale, in f32
// (exact, and exact again once rounded to bf16 / f16); c0 a multiple of 8, all eight in one scale block (blocks are
// >= 16 along K). The load is 8 bytes (e4m3) or 4 (e2m1), aligned.
__device__ __forceinline__ void dequant8_folded(const WeightScales& s, const uint8_t* row, int64_t e, int64_t r,
                                                int64_t c0, float (&v)[8]) {
    if (s.format == QuantFormat::kFp8) {
        const uint2 q = *reinterpret_cast<const uint2*>(row + c0);
        e4m3x4_to_f32(q.x, v), e4m3x4_to_f32(q.y, v + 4);
    } else {
        e2m1x8_to_f32(*reinterpret_cast<const uint32_t*>(row + c0 / 2), fold_scale(s, e, r, c0), v);
    }
}

// Eight f32 values rounded to 16-bit T, packed as one 16-byte vector (the layout of a 16-byte load of T).
template <class T>
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
    uint4 v;
    T* t = reinterpret_cast<T*>(&v);
#pragma unroll
    for (int i = 0; i < 8; ++i) t[i] = from_f32<T>(f[i]);
    return v;
}
// dequant8_folded, packed: eight weights (e, r, c0 ..) as the MMA operand of a 16-bit kernel.
template <class T>
__device__ __forceinline__ uint4 load_quant8(const WeightScales& s, const uint8_t* row, int64_t e, int64_t r,
                                             int64_t c0) {
    float f[8];
    dequant8_folded(s, row, e, r, c0, f);
    return pack8<T>(f);
}

// The K slice one promotion covers (quantized weights in a 16-bit kernel).
__host__ __device__ __forceinline__ int64_t promotion_group(const WeightScales& s, int64_t K) {
    return s.format == QuantFormat::kFp8 && s.col_shift < 62 ? int64_t(1) << s.col_shift : K;
}

// The code of weight c of K-major row bytes `row`, any alignment (the scalar loops).
__device__ __forceinline__ float code_at(const WeightScales& s, const uint8_t* row, int64_t c) {
    return s.format == QuantFormat::kFp8 ? e4m3_to_f32(row[c]) : e2m1_to_f32(row[c / 2] >> (4 * (c & 1)));
}
// One quantized weight: its value (f32 kernels), or code * fold_scale (16-bit kernels).
__device__ __forceinline__ float dequant1(const WeightScales& s, const uint8_t* row, int64_t e, int64_t r, int64_t c) {
    return code_at(s, row, c) * weight_scale(s, e, r, c);
}
__device__ __forceinline__ float dequant1_folded(const WeightScales& s, const uint8_t* row, int64_t e, int64_t r,
                                                 int64_t c) {
    return code_at(s, row, c) * fold_scale(s, e, r, c);
}

// Bytes of one K-major weight row of K values.
__host__ __device__ __forceinline__ int64_t quant_row_bytes(QuantFormat f, int64_t K) {
    return f == QuantFormat::kFp8 ? K : K / 2;
}

}  // namespace moex::cuda
