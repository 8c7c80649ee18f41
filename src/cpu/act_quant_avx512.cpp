// The activation rounding of act_quant.cpp, 16 values at a time (the avx512 table's round_e4m3): the bits of the
// scalar f32_to_fp8e4m3 / fp8e4m3_to_f32 round trip for every input (tests/test_quant.cpp compares them).
// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands), not about this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>

namespace moex::cpu {
namespace {

// e4m3(v) as an f32, for 16 values: NaN stays NaN (sign | 0x7fc00000), |v| >= 448 (inf included) saturates, below
// 2^-6 the subnormal steps of 2^-9 round to nearest even, above it the 20 dropped mantissa bits do.
inline __m512 e4m3_value(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i sign = _mm512_and_si512(u, _mm512_set1_epi32(int(0x80000000u)));
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    // normal range: RNE on the dropped bits, saturated at 448
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 20), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(a, _mm512_add_epi32(_mm512_set1_epi32(0x7ffff), odd));
    r = _mm512_and_si512(r, _mm512_set1_epi32(int(0xfff00000u)));
    r = _mm512_min_epu32(r, _mm512_set1_epi32(0x43e00000));
    // subnormal range: q = RNE(|v| * 512), value q / 512 (exact)
    const __m512 sub = _mm512_mul_ps(
        _mm512_roundscale_ps(_mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(512.0f)), _MM_FROUND_TO_NEAREST_INT),
        _mm512_set1_ps(1.0f / 512.0f));
    const __mmask16 small = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x3c800000));
    r = _mm512_mask_mov_epi32(r, small, _mm512_castps_si512(sub));
    r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000)),
                              _mm512_set1_epi32(0x7fc00000));
    return _mm512_castsi512_ps(_mm512_or_si512(r, sign));
}

// The lanes of a 16-float step that lie before n (all 16 but in the tail).
inline __mmask16 lanes_before(int64_t i, int64_t n) {
    return n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
}

}  // namespace

// dst[i] = e4m3(divide ? src[i] / q : src[i] * q) * s for i < n.
void round_e4m3_avx512(const float* src, float* dst, int64_t n, float q, bool divide, float s) {
    const __m512 qv = _mm512_set1_ps(q), sv = _mm512_set1_ps(s);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 mk = lanes_before(i, n);
        const __m512 x = _mm512_maskz_loadu_ps(mk, src + i);
        const __m512 v = divide ? _mm512_div_ps(x, qv) : _mm512_mul_ps(x, qv);
        _mm512_mask_storeu_ps(dst + i, mk, _mm512_mul_ps(e4m3_value(v), sv));
    }
}

// The largest |src[i]| for i < n, NaNs ignored (as std::fmax does).
float abs_max_avx512(const float* src, int64_t n) {
    __m512 m = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(lanes_before(i, n), src + i));
        m = _mm512_max_ps(a, m);  // MAXPS returns the second operand when the first is NaN
    }
    return _mm512_reduce_max_ps(m);
}

}  // namespace moex::cpu
