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

// Eight e2m1 codes (one word, lowest nibble first) times `fold` as four bf16 pairs, in 15 integer instructions and
// four bf16x2 multiplies: byte tables looked up by prmt give the low and high bytes of each magnitude's bf16 ({0, .5,
// 1, 1.5, 2, 3, 4, 6}: 0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040, 0x4080, 0x40c0), the sign bits are moved onto
// the high bytes, and the bytes are paired into bf16s. The code values are exact, so * fold rounds code * fold once,
// as the float path does. (It replaced a bit-placement decode that took 31 integer instructions and eight multiplies.)
__device__ __forceinline__ uint4 e2m1x8_to_bf16(uint32_t w, __nv_bfloat162 fold) {
    constexpr uint32_t kLo03 = 0xc0800000u, kLo47 = 0xc0804000u;  // low bytes of magnitudes 0-3 and 4-7
    constexpr uint32_t kHi03 = 0x3f3f3f00u, kHi47 = 0x40404040u;  // high bytes
    const uint32_t m = w & 0x77777777u, m47 = m >> 16;  // magnitude indices (a selector's bit 3 would sign-extend)
    const uint32_t w4 = w << 4;  // byte i of w4 has code 2i's sign in bit 7, byte i of w code 2i + 1's
    const uint32_t lo03 = __byte_perm(kLo03, kLo47, m), lo47 = __byte_perm(kLo03, kLo47, m47);
    const uint32_t hi03 = __byte_perm(kHi03, kHi47, m) | (__byte_perm(w, w4, 0x1504) & 0x80808080u);
    const uint32_t hi47 = __byte_perm(kHi03, kHi47, m47) | (__byte_perm(w, w4, 0x3726) & 0x80808080u);
    const uint32_t pair[4] = {__byte_perm(lo03, hi03, 0x5140), __byte_perm(lo03, hi03, 0x7362),
                              __byte_perm(lo47, hi47, 0x5140), __byte_perm(lo47, hi47, 0x7362)};
    uint32_t r[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&pair[j]), fold);
        r[j] = *reinterpret_cast<const uint32_t*>(&v);
    }
    return {r[0], r[1], r[2], r[3]};
}
// An e2m1 block's fold scale (quant.cuh fold_scale) as a bf16 pair, from its stored byte: mxfp4 2^(b - 127) (bf16
// bits b << 7; b = 0 is the subnormal 2^-127 and 255 NaN, as ue8m0_to_f32), nvfp4 the e4m3 value (exact in bf16).
template <bool kNvfp4>
__device__ __forceinline__ __nv_bfloat162 e2m1_fold_bf16x2(uint32_t b) {
    b &= 0xffu;
    if constexpr (kNvfp4) return __float2bfloat162_rn(e4m3_to_f32(b));
    const uint32_t bits = b == 0u ? 0x00400040u : b == 255u ? 0x7fc07fc0u : b * 0x00800080u;
    return *reinterpret_cast<const __nv_bfloat162*>(&bits);
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
