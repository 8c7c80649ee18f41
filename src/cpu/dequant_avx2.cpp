// AVX2 dequantization of quantized expert weights into f32 rows (the kernel table's `dequant`): e4m3 through F16C
// (the 7 value bits shifted into an f16 with 2^-8 bias, NaN kept), e2m1 through a 16-entry byte shuffle. The scale
// of a group is applied by one multiply, so each element is code * (scale * global) rounded once, as in dequant.h.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "src/cpu/kernels.h"

namespace moex::cpu {
namespace {

// File-local scalar codecs (no inline function shared with portable code is compiled here with AVX2 enabled).
float bits_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

float e4m3_value(uint8_t b) {
    const uint32_t sign = uint32_t(b & 0x80u) << 24, exp = (b >> 3) & 0xfu, man = b & 7u;
    if (exp == 0xf && man == 7) return bits_f32(sign | 0x7fc00000u);
    if (exp == 0) {
        const float v = float(man) * (1.0f / 512.0f);
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 120u) << 23) | (man << 20));
}

float ue8m0_value(uint8_t b) {
    if (b == 0xff) return bits_f32(0x7fc00000u);
    if (b == 0) return bits_f32(0x00400000u);
    return bits_f32(uint32_t(b) << 23);
}

float e2m1_value(uint8_t c) {
    constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return (c & 8u) ? -kMag[c & 7u] : kMag[c & 7u];
}

// Scale (srow, g) * global; i = srow * ld + g is computed by the caller without a division per group.
float group_scale(const WeightQuant& q, int64_t i) {
    float s;
    switch (q.scale_dtype) {
        case DType::kF32: s = static_cast<const float*>(q.scale)[i]; break;
        case DType::kFP8E4M3: s = e4m3_value(static_cast<const uint8_t*>(q.scale)[i]); break;
        default: s = ue8m0_value(static_cast<const uint8_t*>(q.scale)[i]); break;
    }
    return s * q.global;
}

// 8 e4m3 bytes -> 8 f32 times 2^-8: |b| << 7 is the f16 of value * 2^-8 (subnormals included), the sign moves to
// bit 15, and 0x7f (NaN) gets the all-ones f16 exponent.
inline __m256 e4m3x8(const uint8_t* p) {
    const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m128i mag = _mm_and_si128(w, _mm_set1_epi16(0x7f));
    const __m128i sign = _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8);
    const __m128i nan = _mm_and_si128(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f)), _mm_set1_epi16(0x7c00));
    return _mm256_cvtph_ps(_mm_or_si128(_mm_or_si128(_mm_slli_epi16(mag, 7), sign), nan));
}

// 8 codes (one per byte, k order) -> 8 f32 of twice their value: the magnitude from a byte shuffle, the sign bit 3
// moved to bit 31 (so code 8 is -0, as in the scalar decoder).
inline __m256 e2m1x8(__m128i codes) {
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12);
    const __m256i c = _mm256_cvtepu8_epi32(codes);
    const __m256 mag = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_shuffle_epi8(lut, codes)));
    const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(c, 28), _mm256_set1_epi32(int32_t(0x80000000u)));
    return _mm256_or_ps(mag, _mm256_castsi256_ps(sign));
}

// 8 bytes = 16 e2m1 codes (low nibble first) -> 2 x 8 f32 of twice their value.
inline void e2m1x16(const uint8_t* p, __m256& lo8, __m256& hi8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i nib = _mm_set1_epi8(0x0f);
    const __m128i codes = _mm_unpacklo_epi8(_mm_and_si128(b, nib), _mm_and_si128(_mm_srli_epi16(b, 4), nib));
    lo8 = e2m1x8(codes);
    hi8 = e2m1x8(_mm_srli_si128(codes, 8));
}

// Prefetch distance in the stored bytes: rows of one matrix are contiguous, so this reaches into the rows the next
// calls dequantize. Without it a thread alternates DRAM waits and compute (decode at T = 1 read 2.4 GB/s per thread).
constexpr int64_t kAheadBytes = 8192;

// Elements [k, k1) of row r, all under one scale sg.
void run_fp8(const uint8_t* row, int64_t k, int64_t k1, float sg, float* d) {
    const __m256 s = _mm256_set1_ps(sg * 256.0f);  // exact: a power-of-two step
    for (; k + 64 <= k1; k += 64, d += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(row + k + kAheadBytes), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int u = 0; u < 64; u += 8) _mm256_storeu_ps(d + u, _mm256_mul_ps(e4m3x8(row + k + u), s));
    }
    for (; k + 8 <= k1; k += 8, d += 8) _mm256_storeu_ps(d, _mm256_mul_ps(e4m3x8(row + k), s));
    for (; k < k1; ++k) *d++ = e4m3_value(row[k]) * sg;
}

void run_fp4(const uint8_t* row, int64_t k, int64_t k1, float sg, float* d) {
    const __m256 s = _mm256_set1_ps(sg * 0.5f);
    for (; k < k1 && (k & 15) != 0; ++k) *d++ = e2m1_value((k & 1) ? row[k / 2] >> 4 : row[k / 2] & 15u) * sg;
    for (; k + 16 <= k1; k += 16, d += 16) {
        if ((k & 127) == 0) _mm_prefetch(reinterpret_cast<const char*>(row + k / 2 + kAheadBytes), _MM_HINT_T0);
        __m256 lo, hi;
        e2m1x16(row + k / 2, lo, hi);
        _mm256_storeu_ps(d, _mm256_mul_ps(lo, s));
        _mm256_storeu_ps(d + 8, _mm256_mul_ps(hi, s));
    }
    for (; k < k1; ++k) *d++ = e2m1_value((k & 1) ? row[k / 2] >> 4 : row[k / 2] & 15u) * sg;
}

}  // namespace

void dequant_avx2(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, float* dst, int64_t ldd) {
    const bool fp8 = b.q.format == QuantFormat::kFp8;
    const int64_t bk = b.q.bk, g0 = k0 / bk;  // two divisions per call, one per row: none per group
    for (int64_t r = 0; r < n; ++r) {
        const auto* row = static_cast<const uint8_t*>(b.data) + r * b.ld;
        float* d = dst + r * ldd;
        const int64_t first = ((b.q.row0 + r) / b.q.bn) * b.q.ld;
        int64_t g = g0;
        for (int64_t k = k0, end = k0 + kc; k < end; ++g) {
            const int64_t g1 = (g + 1) * bk, k1 = g1 < end ? g1 : end;
            const float sg = group_scale(b.q, first + g);
            if (fp8)
                run_fp8(row, k, k1, sg, d + (k - k0));
            else
                run_fp4(row, k, k1, sg, d + (k - k0));
            k = k1;
        }
    }
}

}  // namespace moex::cpu
