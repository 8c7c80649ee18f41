// AVX2 helpers shared by the *_avx2.cpp files only (never include this from portable code): widening loads of
// bf16/f16/f32 to 8 f32 lanes, a fixed-order horizontal sum and the bf16 rounding. Everything here is static to each
// file that includes it, so no AVX2 copy of a shared inline function can leak into portable code through the linker.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace moex::cpu {
namespace {

// Widening loads: Load::T is the stored element type; load8 reads 8 elements, load_n reads n < 8 and zero-fills.
struct LoadBF16 {
    using T = uint16_t;
    static __m256 load8(const T* p) {  // bf16 -> f32 is a 16-bit left shift
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    static __m256 load_n(const T* p, int64_t n) {
        alignas(16) T tmp[8] = {};
        std::memcpy(tmp, p, size_t(n) * sizeof(T));
        return load8(tmp);
    }
};

struct LoadF16 {
    using T = uint16_t;
    static __m256 load8(const T* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static __m256 load_n(const T* p, int64_t n) {
        alignas(16) T tmp[8] = {};
        std::memcpy(tmp, p, size_t(n) * sizeof(T));
        return load8(tmp);
    }
};

struct LoadF32 {
    using T = float;
    static __m256 load8(const T* p) { return _mm256_loadu_ps(p); }
    static __m256 load_n(const T* p, int64_t n) {
        alignas(32) T tmp[8] = {};
        std::memcpy(tmp, p, size_t(n) * sizeof(T));
        return _mm256_load_ps(tmp);
    }
};

// Lane mask of the first n (0..8) lanes, for maskload/maskstore.
inline __m256i first_lanes(int64_t n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), idx);
}

// Fixed pairwise order: (l0+l4, l1+l5, l2+l6, l3+l7), then (.0+.2, .1+.3), then the two.
inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// f32_to_bf16 of 8 lanes (moex/dtype.h): round to nearest even on the bits, NaNs quieted with their sign. Each lane's
// bf16 is its upper 16 bits, the lower 16 zero, so the lane also reads as the rounded f32.
inline __m256 round_bf16(__m256 v) {
    const __m256i u = _mm256_castps_si256(v), top = _mm256_set1_epi32(int(0xffff0000u));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rne = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), top);
    const __m256i nan = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), top);
    const __m256 is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    return _mm256_blendv_ps(_mm256_castsi256_ps(rne), _mm256_castsi256_ps(nan), is_nan);
}

}  // namespace
}  // namespace moex::cpu
