// AVX-512 decode GEMV, the AVX-512 table's stream for rows-layout weights and 2+ rows of A (AVX2's otherwise): one
// zmm holds two rows of B (lanes 0-7 row j, 8-15 row j + 1), each half summing k = l mod 8 in increasing k, then
// lane-summed, as the AVX2 dot kernel's ymm: the AVX2 table's bits at half the fma count.
// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands), not about this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>

#include "src/cpu/kernels.h"
#include "src/cpu/simd_avx2.h"

namespace moex::cpu {

void stream_avx2(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc);

namespace {

constexpr int64_t kAhead = 16384;  // prefetch distance, as the AVX2 kernel's

#define MOEX_INLINE inline __attribute__((always_inline))

inline void in_register(__m512& v) { asm("" : "+v"(v)); }

// Two rows of B as one zmm: 8 elements at k of row p (low half) and of row p + ld (high half); `rest` < 8 zero-fills
// the k tail, `one` leaves the high half zero (the last row of an odd n).
// The 16-bit halves of both: 8 raw elements of row p, then 8 of row p + ld (or zeros).
MOEX_INLINE __m256i load_pair16(const uint16_t* p, int64_t ld, int64_t rest, bool one) {
    const __mmask8 m = __mmask8(rest >= 8 ? 0xff : (1u << rest) - 1);
    const __m128i lo = _mm_maskz_loadu_epi16(m, p);
    const __m128i hi = one ? _mm_setzero_si128() : _mm_maskz_loadu_epi16(m, p + ld);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}
struct PairBF16 {
    using T = uint16_t;
    static MOEX_INLINE __m512 load(const T* p, int64_t ld, int64_t rest, bool one) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(load_pair16(p, ld, rest, one)), 16));
    }
};
struct PairF16 {
    using T = uint16_t;
    static MOEX_INLINE __m512 load(const T* p, int64_t ld, int64_t rest, bool one) {
        return _mm512_cvtph_ps(load_pair16(p, ld, rest, one));
    }
};
struct PairF32 {
    using T = float;
    static MOEX_INLINE __m512 load(const T* p, int64_t ld, int64_t rest, bool one) {
        const __mmask8 m = __mmask8(rest >= 8 ? 0xff : (1u << rest) - 1);
        const __m256 lo = _mm256_maskz_loadu_ps(m, p);
        const __m256 hi = one ? _mm256_setzero_ps() : _mm256_maskz_loadu_ps(m, p + ld);
        return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
    }
};

// NP pairs of B rows (2 * NP rows from w, the last pair one row when `odd`) against MB rows of A, over all K.
template <class L, int NP, int MB>
void pair_tile(const float* const* a, const typename L::T* w, int64_t ldw, int64_t K, float* c, int64_t ldc, int rows) {
    static_assert(NP * MB + (MB <= NP ? MB : NP) + 1 <= 32, "the tile must fit the 32 zmm registers");
    __m512 acc[NP][MB];
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p)
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb) acc[p][mb] = _mm512_setzero_ps();
    const int64_t block = 2 * NP * ldw * int64_t(sizeof(typename L::T));
    const int64_t ahead = 2 * NP * ldw * (kAhead / block + 1);
    auto step = [&](int64_t k, int64_t rest) __attribute__((always_inline)) {
        const __mmask8 m8 = __mmask8(rest >= 8 ? 0xff : (1u << rest) - 1);
        __m512 av[MB];
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb) {
            av[mb] = _mm512_broadcast_f32x8(_mm256_maskz_loadu_ps(m8, a[mb] + k));
            in_register(av[mb]);
        }
#pragma GCC unroll 8
        for (int p = 0; p < NP; ++p) {
            __m512 wv = L::load(w + 2 * p * ldw + k, ldw, rest, 2 * p + 1 >= rows);
            in_register(wv);
#pragma GCC unroll 6
            for (int mb = 0; mb < MB; ++mb) acc[p][mb] = _mm512_fmadd_ps(wv, av[mb], acc[p][mb]);
        }
    };
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
#pragma GCC unroll 16
        for (int r = 0; r < 2 * NP; ++r) {
            const char* p = reinterpret_cast<const char*>(w + ahead + r * ldw + k);
            _mm_prefetch(p, _MM_HINT_T1);
            if constexpr (sizeof(typename L::T) == 4) _mm_prefetch(p + 64, _MM_HINT_T1);
        }
#pragma GCC unroll 4
        for (int u = 0; u < 32; u += 8) step(k + u, 8);
    }
    for (; k + 8 <= K; k += 8) step(k, 8);
    if (k < K) step(k, K - k);
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p)
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb) {
            c[mb * ldc + 2 * p] = hsum8(_mm512_castps512_ps256(acc[p][mb]));
            if (2 * p + 1 < rows) c[mb * ldc + 2 * p + 1] = hsum8(_mm512_extractf32x8_ps(acc[p][mb], 1));
        }
}

// All n rows of B against MB rows of A, 2 * NP rows at a time, the rest in pairs.
template <class L, int NP, int MB>
void pass(const float* const* a, const typename L::T* w, int64_t ldw, int64_t K, int64_t n, float* c, int64_t ldc) {
    int64_t j = 0;
    for (; j + 2 * NP <= n; j += 2 * NP) pair_tile<L, NP, MB>(a, w + j * ldw, ldw, K, c + j, ldc, 2 * NP);
    for (; j < n; j += 2) pair_tile<L, 1, MB>(a, w + j * ldw, ldw, K, c + j, ldc, int(n - j < 2 ? 1 : 2));
}

// m >= 6: 2 * NP rows of B (kept in L1) against the rows of A in passes of 6 (A from L2).
template <class L, int NP>
void block(const float* const* a, int64_t m, const typename L::T* w, int64_t ldw, int64_t K, float* c, int64_t ldc,
           int rows) {
    int64_t r = 0;
    for (; r + 6 <= m; r += 6) pair_tile<L, NP, 6>(a + r, w, ldw, K, c + r * ldc, ldc, rows);
    switch (m - r) {
        case 1: return pair_tile<L, NP, 1>(a + r, w, ldw, K, c + r * ldc, ldc, rows);
        case 2: return pair_tile<L, NP, 2>(a + r, w, ldw, K, c + r * ldc, ldc, rows);
        case 3: return pair_tile<L, NP, 3>(a + r, w, ldw, K, c + r * ldc, ldc, rows);
        case 4: return pair_tile<L, NP, 4>(a + r, w, ldw, K, c + r * ldc, ldc, rows);
        case 5: return pair_tile<L, NP, 5>(a + r, w, ldw, K, c + r * ldc, ldc, rows);
        default: return;
    }
}

template <class L>
void stream_dot(const float* const* a, int64_t m, const typename L::T* w, int64_t ldw, int64_t K, int64_t n, float* c,
                int64_t ldc) {
    switch (m) {
        case 1: return pass<L, 8, 1>(a, w, ldw, K, n, c, ldc);
        case 2: return pass<L, 6, 2>(a, w, ldw, K, n, c, ldc);
        case 3: return pass<L, 4, 3>(a, w, ldw, K, n, c, ldc);
        case 4: return pass<L, 4, 4>(a, w, ldw, K, n, c, ldc);
        case 5: return pass<L, 4, 5>(a, w, ldw, K, n, c, ldc);
        default: break;
    }
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) block<L, 2>(a, m, w + j * ldw, ldw, K, c + j, ldc, 4);
    for (; j < n; j += 2) block<L, 1>(a, m, w + j * ldw, ldw, K, c + j, ldc, int(n - j < 2 ? 1 : 2));
}

}  // namespace

#undef MOEX_INLINE

void stream_avx512(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    // One row of A: the AVX2 kernel's 8 rows of B per tile beat 16 in pairs (30-42 against 24-33 GFLOP/s from L2,
    // one thread; both far above a core's share of DRAM). 2-24 rows: 1.1-1.7x the AVX2 kernel (same measurement).
    if (b.transposed || m == 1) return stream_avx2(a, m, b, n, c, ldc);
    switch (b.dtype) {
        case DType::kBF16:
            return stream_dot<PairBF16>(a, m, static_cast<const uint16_t*>(b.data), b.ld, b.K, n, c, ldc);
        case DType::kF16: return stream_dot<PairF16>(a, m, static_cast<const uint16_t*>(b.data), b.ld, b.K, n, c, ldc);
        default: return stream_dot<PairF32>(a, m, static_cast<const float*>(b.data), b.ld, b.K, n, c, ldc);
    }
}

}  // namespace moex::cpu
