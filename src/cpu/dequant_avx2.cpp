// AVX2 dequantization of quantized expert weights (the kernel table's `dequant` into f32 rows, and `stream_fused`,
// the decode GEMV that decodes in registers): e4m3 by integer shifts into an f32 with a 2^-120 bias (NaN kept), e2m1
// through a 16-entry byte shuffle. A group's scale (times the bias) is one multiply, so each element is
// code * (scale * global) rounded once, as in dequant.h.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "src/cpu/kernels.h"
#include "src/cpu/scalar_codecs_local.h"
#include "src/cpu/simd_avx2.h"

namespace moex::cpu {
namespace {

// 8 e4m3 bytes -> 8 f32 times 2^-120: a sign-extended byte shifted by 20 puts the 7 value bits where an f32's low
// exponent and top mantissa bits are (subnormals included, as f32 subnormals) and the sign at bit 31; 0x7f (NaN)
// gets the all-ones exponent. Five integer operations, no F16C.
inline __m256 e4m3x8(const uint8_t* p) {
    const __m256i t = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i f = _mm256_and_si256(_mm256_slli_epi32(t, 20), _mm256_set1_epi32(int32_t(0x87f00000u)));
    const __m256i nan =
        _mm256_cmpeq_epi32(_mm256_and_si256(f, _mm256_set1_epi32(0x7ff00000)), _mm256_set1_epi32(0x07f00000));
    return _mm256_castsi256_ps(_mm256_or_si256(f, _mm256_and_si256(nan, _mm256_set1_epi32(0x7f800000))));
}

// The decoder's values carry 2^-120: a group scale sg < 2^8 takes it in one exact factor sg * 2^120, so each weight
// is one multiply rounded once, as code * sg. Larger scales (not produced by amax / 448 scaling of finite bf16
// weights) first undo the bias in two exact steps.
inline bool biased_scale_fits(float sg) { return std::fabs(sg) < 256.0f; }
inline __m256 unbias_e4m3(__m256 v) {
    const __m256 step = _mm256_set1_ps(0x1.0p60f);
    return _mm256_mul_ps(_mm256_mul_ps(v, step), step);
}

// e4m3x8 without the NaN fix-up, for the decode GEMV: code 0x7f decodes finite there and its row is made NaN after the
// tile (row_has_nan), which takes 4 of the 9 vector operations per 8 weights out of the inner loop.
inline __m256 e4m3x8_finite(const uint8_t* p) {
    const __m256i t = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(t, 20), _mm256_set1_epi32(int32_t(0x87f00000u))));
}

// Any e4m3 NaN code (0x7f, 0xff) among the K bytes of a row: its outputs are NaN whatever A holds.
bool row_has_nan(const uint8_t* row, int64_t K) {
    const __m256i m7f = _mm256_set1_epi8(0x7f);
    __m256i any = _mm256_setzero_si256();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k));
        any = _mm256_or_si256(any, _mm256_cmpeq_epi8(_mm256_and_si256(v, m7f), m7f));
    }
    bool nan = _mm256_movemask_epi8(any) != 0;
    for (; k < K; ++k) nan |= (row[k] & 0x7f) == 0x7f;
    return nan;
}

// 8 codes (one per byte, k order) -> 8 f32: the magnitude from an 8-entry f32 table (vpermps reads the index's low
// 3 bits), the sign bit 3 moved to bit 31 (so code 8 is -0, as in the scalar decoder).
inline __m256 e2m1x8(__m128i codes) {
    const __m256 lut = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m256i c = _mm256_cvtepu8_epi32(codes);
    const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(c, 28), _mm256_set1_epi32(int32_t(0x80000000u)));
    return _mm256_or_ps(_mm256_permutevar8x32_ps(lut, c), _mm256_castsi256_ps(sign));
}

// 8 bytes = 16 e2m1 codes (low nibble first) -> 2 x 8 f32.
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
    if (!biased_scale_fits(sg)) {
        const __m256 s = _mm256_set1_ps(sg);
        for (; k + 8 <= k1; k += 8, d += 8) _mm256_storeu_ps(d, _mm256_mul_ps(unbias_e4m3(e4m3x8(row + k)), s));
        for (; k < k1; ++k) *d++ = e4m3_value(row[k]) * sg;
        return;
    }
    const __m256 s = _mm256_set1_ps(sg * 0x1.0p120f);
    for (; k + 64 <= k1; k += 64, d += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(row + k + kAheadBytes), _MM_HINT_T0);
#pragma GCC unroll 8
        for (int u = 0; u < 64; u += 8) _mm256_storeu_ps(d + u, _mm256_mul_ps(e4m3x8(row + k + u), s));
    }
    for (; k + 8 <= k1; k += 8, d += 8) _mm256_storeu_ps(d, _mm256_mul_ps(e4m3x8(row + k), s));
    for (; k < k1; ++k) *d++ = e4m3_value(row[k]) * sg;
}

void run_fp4(const uint8_t* row, int64_t k, int64_t k1, float sg, float* d) {
    const __m256 s = _mm256_set1_ps(sg);
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

// ---- the fused streaming kernel: C = A·Bᵀ for m <= 4 rows of A, B's codes decoded and scaled in registers ----

// The 16 weights of row p at k, scaled (s: the group scale times the decoder's bias): the f32 values dequant writes.
template <bool Fp8>
inline void load_scaled(const uint8_t* p, int64_t k, __m256 s, __m256& lo, __m256& hi) {
    if constexpr (Fp8) {
        lo = _mm256_mul_ps(e4m3x8_finite(p + k), s);
        hi = _mm256_mul_ps(e4m3x8_finite(p + k + 8), s);
    } else {
        e2m1x16(p + k / 2, lo, hi);
        lo = _mm256_mul_ps(lo, s), hi = _mm256_mul_ps(hi, s);
    }
}

// NB rows of B (from row j of the matrix) against MB rows of A; lane l of acc[nb][mb] sums k = l mod 8 in
// increasing k with one fma per element and a fixed pairwise lane sum, the f32 dot kernel's order, so each output
// has the bits that kernel gives on the dequantized rows. K and the scale group bk are multiples of 16.
template <bool Fp8, int NB, int MB>
void fused_tile(const float* const* a, const WeightMat& b, int64_t j, float* c, int64_t ldc) {
    __m256 acc[NB][MB];
#pragma GCC unroll 8
    for (int nb = 0; nb < NB; ++nb)
#pragma GCC unroll 4
        for (int mb = 0; mb < MB; ++mb) acc[nb][mb] = _mm256_setzero_ps();
    const int64_t K = b.K, bk = b.q.bk < K ? b.q.bk : K, ld = b.ld;
    const auto* w = static_cast<const uint8_t*>(b.data) + j * ld;
    int64_t first[NB];
#pragma GCC unroll 8
    for (int nb = 0; nb < NB; ++nb) first[nb] = ((b.q.row0 + j + nb) / b.q.bn) * b.q.ld;
    const float factor = Fp8 ? 0x1.0p120f : 1.0f;  // the e4m3 decoder's exact power-of-two bias
    // Prefetch the same bytes of the rows a whole number of tiles (>= kAheadBytes) further on: a fixed distance from
    // each row reaches only this tile and part of the next (see stream_fused_avx512.cpp).
    const int64_t ahead = NB * ld * (kAheadBytes / (NB * ld) + 1);
    for (int64_t k0 = 0, g = 0; k0 < K; k0 += bk, ++g) {
        __m256 s[NB];
#pragma GCC unroll 8
        for (int nb = 0; nb < NB; ++nb) s[nb] = _mm256_set1_ps(group_scale(b.q, first[nb] + g) * factor);
        for (int64_t k = k0; k < k0 + bk; k += 16) {
            if ((k & 63) == 0)
#pragma GCC unroll 8
                for (int nb = 0; nb < NB; ++nb)
                    _mm_prefetch(reinterpret_cast<const char*>(w + ahead + nb * ld + (Fp8 ? k : k / 2)), _MM_HINT_T1);
#pragma GCC unroll 8
            for (int nb = 0; nb < NB; ++nb) {
                __m256 lo, hi;
                load_scaled<Fp8>(w + nb * ld, k, s[nb], lo, hi);
#pragma GCC unroll 4
                for (int mb = 0; mb < MB; ++mb) {
                    acc[nb][mb] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(a[mb] + k), acc[nb][mb]);
                    acc[nb][mb] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(a[mb] + k + 8), acc[nb][mb]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int nb = 0; nb < NB; ++nb)
#pragma GCC unroll 4
        for (int mb = 0; mb < MB; ++mb) c[mb * ldc + j + nb] = hsum8(acc[nb][mb]);
    if (Fp8)
        for (int nb = 0; nb < NB; ++nb)
            if (row_has_nan(w + nb * ld, K))
                for (int mb = 0; mb < MB; ++mb) c[mb * ldc + j + nb] = bits_f32(0x7fc00000u);
}

template <bool Fp8, int NB, int MB>
void fused_rows(const float* const* a, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    int64_t j = 0;
    for (; j + NB <= n; j += NB) fused_tile<Fp8, NB, MB>(a, b, j, c, ldc);
    for (; j + 2 <= n; j += 2)
        fused_tile<Fp8, 2, MB>(a, b, j, c, ldc);  // tails in pairs: a lone row is fma-latency bound
    for (; j < n; ++j) fused_tile<Fp8, 1, MB>(a, b, j, c, ldc);
}

// Every scale of the rows [0, n) below 2^8 (one multiply per weight in fused_tile).
bool scales_fit(const WeightMat& b, int64_t n) {
    const int64_t bk = b.q.bk < b.K ? b.q.bk : b.K, groups = (b.K + bk - 1) / bk;
    for (int64_t r0 = -1, r = 0; r < n; ++r) {
        const int64_t srow = (b.q.row0 + r) / b.q.bn;
        if (srow == r0) continue;
        r0 = srow;
        for (int64_t g = 0; g < groups; ++g)
            if (!biased_scale_fits(group_scale(b.q, srow * b.q.ld + g))) return false;
    }
    return true;
}

template <bool Fp8>
void fused(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    switch (m) {  // rows of B per tile (FP4 with 4 rows at m = 1 measured within noise of 6)
        case 1: return fused_rows<Fp8, 6, 1>(a, b, n, c, ldc);
        case 2: return fused_rows<Fp8, 4, 2>(a, b, n, c, ldc);
        case 3: return fused_rows<Fp8, 3, 3>(a, b, n, c, ldc);
        default: return fused_rows<Fp8, 2, 4>(a, b, n, c, ldc);
    }
}

}  // namespace

bool stream_fused_avx2(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    const int64_t bk = b.q.bk < b.K ? b.q.bk : b.K;
    if (m < 1 || m > 4 || b.transposed || b.K % 16 != 0 || bk % 16 != 0) return false;
    if (b.q.format == QuantFormat::kFp8 && !scales_fit(b, n)) return false;
    if (b.q.format == QuantFormat::kFp8)
        fused<true>(a, m, b, n, c, ldc);
    else
        fused<false>(a, m, b, n, c, ldc);
    return true;
}

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
