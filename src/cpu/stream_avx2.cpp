// AVX2 small-m kernels that stream B from memory once per call (decode): C[r][c] = Σ_k a[r][k]·B(c, k), r < m.
// Rows layout (N, K): dot form, one 8-lane accumulator per (r, c). Transposed (K, N): axpy form over whole rows of
// B, 4 at a time. bf16/f16 widen in registers, so B is read at 2 bytes per element, straight from DRAM.
#include "src/cpu/kernels.h"
#include "src/cpu/simd_avx2.h"

namespace moex::cpu {
namespace {

// Prefetch distance: while a block of NB rows of B is multiplied, the rows about kAhead bytes further on are fetched
// into L2 (at least the next block). A multi-pass block (m >= 6, NB = 2 rows of B kept in L1 for all passes) thus
// overlaps its DRAM traffic with all its passes, and 2-row blocks still keep ~16 KiB of requests in flight.
constexpr int64_t kAhead = 16384;  // 8-64 KiB measured within noise of each other

// Keeps v in a register: without it GCC folds the A loads into every fma as a memory operand, which makes the
// loop load-bound (NB*MB + NB loads per NB*MB fmas instead of NB + MB).
inline void in_register(__m256& v) { asm("" : "+x"(v)); }

#define MOEX_INLINE inline __attribute__((always_inline))

// One 8-wide k step of dot_tile (Tail: the last K - k < 8 elements, zero-padded).
template <class L, int NB, int MB, bool Tail>
MOEX_INLINE void dot_step(__m256 (&acc)[NB][MB], const float* const* a, const typename L::T* w, int64_t ldw, int64_t k,
                          int64_t rest) {
    const __m256i mask = Tail ? first_lanes(rest) : _mm256_setzero_si256();
    auto load_a = [&](int mb) __attribute__((always_inline)) {
        __m256 v = Tail ? _mm256_maskload_ps(a[mb] + k, mask) : _mm256_loadu_ps(a[mb] + k);
        in_register(v);
        return v;
    };
    auto load_w = [&](int nb) __attribute__((always_inline)) {
        __m256 v = Tail ? L::load_n(w + nb * ldw + k, rest) : L::load8(w + nb * ldw + k);
        in_register(v);
        return v;
    };
    if constexpr (MB <= NB) {
        __m256 av[MB];
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb) av[mb] = load_a(mb);
#pragma GCC unroll 8
        for (int nb = 0; nb < NB; ++nb) {
            const __m256 wv = load_w(nb);
#pragma GCC unroll 6
            for (int mb = 0; mb < MB; ++mb) acc[nb][mb] = _mm256_fmadd_ps(wv, av[mb], acc[nb][mb]);
        }
    } else {
        __m256 wv[NB];
#pragma GCC unroll 8
        for (int nb = 0; nb < NB; ++nb) wv[nb] = load_w(nb);
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb) {
            const __m256 av = load_a(mb);
#pragma GCC unroll 8
            for (int nb = 0; nb < NB; ++nb) acc[nb][mb] = _mm256_fmadd_ps(wv[nb], av, acc[nb][mb]);
        }
    }
}

// NB rows of B against MB rows of A. Lane l of acc[nb][mb] sums k = l mod 8 in increasing k; the k tail is zero-padded.
// MB <= NB keeps the MB rows of A in registers and streams B one vector at a time (NB*MB + MB + 1 registers);
// MB > NB keeps the NB rows of B in registers and streams A (NB*MB + NB + 1 registers).
// The tile's rows are ldw elements apart and its outputs c[mb*ldc + nb*cs]; `ahead`: elements from a row to the one
// its stream reads about kAhead bytes later (prefetched now, one line per row per 64 bytes of bf16).
template <class L, int NB, int MB>
void dot_tile(const float* const* a, const typename L::T* w, int64_t ldw, int64_t K, float* c, int64_t ldc, int64_t cs,
              int64_t ahead) {
    static_assert(NB * MB + (MB <= NB ? MB : NB) + 1 <= 16, "the tile must fit the 16 ymm registers");
    __m256 acc[NB][MB];
#pragma GCC unroll 8
    for (int nb = 0; nb < NB; ++nb)
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb) acc[nb][mb] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
#pragma GCC unroll 8
        for (int nb = 0; nb < NB; ++nb) {
            const char* p = reinterpret_cast<const char*>(w + ahead + nb * ldw + k);
            _mm_prefetch(p, _MM_HINT_T1);
            if constexpr (sizeof(typename L::T) == 4) _mm_prefetch(p + 64, _MM_HINT_T1);  // f32: 2 lines per 32 k
        }
#pragma GCC unroll 4
        for (int u = 0; u < 32; u += 8) dot_step<L, NB, MB, false>(acc, a, w, ldw, k + u, 8);
    }
    for (; k + 8 <= K; k += 8) dot_step<L, NB, MB, false>(acc, a, w, ldw, k, 8);
    if (k < K) dot_step<L, NB, MB, true>(acc, a, w, ldw, k, K - k);
#pragma GCC unroll 8
    for (int nb = 0; nb < NB; ++nb)
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb) c[mb * ldc + nb * cs] = hsum8(acc[nb][mb]);
}

// A tile of NB adjacent rows (the block kAhead bytes further on prefetched).
template <class L, int NB, int MB>
void dot_tile(const float* const* a, const typename L::T* w, int64_t ldw, int64_t K, float* c, int64_t ldc) {
    const int64_t block = NB * ldw * int64_t(sizeof(typename L::T));
    dot_tile<L, NB, MB>(a, w, ldw, K, c, ldc, 1, NB * ldw * (kAhead / block + 1));
}

// All n rows of B against MB = m <= 5 rows of A in one pass (decode: DRAM-bound), as NB streams: the n rows are NB
// runs of s = n / NB rows and tile j takes row j of every run, so each run is read in order from its start to its
// end while the others are: NB sequential streams far apart, as the read floor's xS kernels read (a tile of NB
// adjacent rows reads NB 4 KiB pages at once, each too short a stream for the core's prefetchers, and measured one
// stream's bandwidth: RESULTS B3). The n - NB·s rows left go one at a time. Each output's sum is the same whichever
// tile computes it.
template <class L, int NB, int MB>
void dot_single_pass(const float* const* a, const typename L::T* w, int64_t ldw, int64_t K, int64_t n, float* c,
                     int64_t ldc) {
    const int64_t s = n / NB;
    if (s > 0) {
        const int64_t row_bytes = ldw * int64_t(sizeof(typename L::T));
        const int64_t ahead = ldw * (kAhead / (NB * row_bytes) + 1);  // rows ahead per stream, kAhead in all
        for (int64_t j = 0; j < s; ++j) dot_tile<L, NB, MB>(a, w + j * ldw, s * ldw, K, c + j, ldc, s, ahead);
    }
    for (int64_t j = NB * s; j < n; ++j) dot_tile<L, 1, MB>(a, w + j * ldw, ldw, K, c + j, ldc);
}

// m >= 6: NB rows of B (kept in L1 across the passes) against the rows of A in passes of 6 (A from L2): 12 fmas
// per 2 + 6 loads, the fma-bound ratio on Zen 3.
template <class L, int NB>
void dot_block(const float* const* a, int64_t m, const typename L::T* w, int64_t ldw, int64_t K, float* c,
               int64_t ldc) {
    int64_t r = 0;
    for (; r + 6 <= m; r += 6) dot_tile<L, NB, 6>(a + r, w, ldw, K, c + r * ldc, ldc);
    switch (m - r) {
        case 1: dot_tile<L, NB, 1>(a + r, w, ldw, K, c + r * ldc, ldc); break;
        case 2: dot_tile<L, NB, 2>(a + r, w, ldw, K, c + r * ldc, ldc); break;
        case 3: dot_tile<L, NB, 3>(a + r, w, ldw, K, c + r * ldc, ldc); break;
        case 4: dot_tile<L, NB, 4>(a + r, w, ldw, K, c + r * ldc, ldc); break;
        case 5: dot_tile<L, NB, 5>(a + r, w, ldw, K, c + r * ldc, ldc); break;
        default: break;
    }
}

template <class L>
void stream_dot(const float* const* a, int64_t m, const typename L::T* w, int64_t ldw, int64_t K, int64_t n, float* c,
                int64_t ldc) {
    switch (m) {
        case 1: return dot_single_pass<L, 8, 1>(a, w, ldw, K, n, c, ldc);
        case 2: return dot_single_pass<L, 6, 2>(a, w, ldw, K, n, c, ldc);
        case 3: return dot_single_pass<L, 3, 3>(a, w, ldw, K, n, c, ldc);
        case 4: return dot_single_pass<L, 2, 4>(a, w, ldw, K, n, c, ldc);
        case 5: return dot_single_pass<L, 2, 5>(a, w, ldw, K, n, c, ldc);
        default: break;
    }
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) dot_block<L, 2>(a, m, w + j * ldw, ldw, K, c + j, ldc);
    if (j < n) dot_block<L, 1>(a, m, w + j * ldw, ldw, K, c + j, ldc);
}

// ---- axpy form: B is (K, N), N-contiguous ----------------------------------------------------------------------

// c[mb][0..n) += Σ_{q<KQ} a[mb][k+q]·w[q][0..n), one fma per (q, element) in increasing k (the packed-path order).
template <class L, int MB, int KQ>
inline void axpy_pass(const float* const* a, int64_t k, const typename L::T* w, int64_t ldw, int64_t n, float* c,
                      int64_t ldc) {
    __m256 av[MB][KQ];
#pragma GCC unroll 2
    for (int mb = 0; mb < MB; ++mb)
#pragma GCC unroll 4
        for (int q = 0; q < KQ; ++q) av[mb][q] = _mm256_broadcast_ss(a[mb] + k + q);
    auto cols = [&](int64_t j, int64_t len) __attribute__((always_inline)) {
        const bool full = len == 8;
        const __m256i mask = first_lanes(len);
        __m256 wv[KQ];
#pragma GCC unroll 4
        for (int q = 0; q < KQ; ++q) wv[q] = full ? L::load8(w + q * ldw + j) : L::load_n(w + q * ldw + j, len);
#pragma GCC unroll 2
        for (int mb = 0; mb < MB; ++mb) {
            float* cp = c + mb * ldc + j;
            __m256 cv = full ? _mm256_loadu_ps(cp) : _mm256_maskload_ps(cp, mask);
#pragma GCC unroll 4
            for (int q = 0; q < KQ; ++q) cv = _mm256_fmadd_ps(av[mb][q], wv[q], cv);
            if (full)
                _mm256_storeu_ps(cp, cv);
            else
                _mm256_maskstore_ps(cp, mask, cv);
        }
    };
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) cols(j, 8);
    if (j < n) cols(j, n - j);
}

template <class L, int KQ>
inline void axpy_rows(const float* const* a, int64_t m, int64_t k, const typename L::T* w, int64_t ldw, int64_t n,
                      float* c, int64_t ldc) {
    for (int64_t r = 0; r < m; r += 2) {
        if (m - r >= 2)
            axpy_pass<L, 2, KQ>(a + r, k, w, ldw, n, c + r * ldc, ldc);
        else
            axpy_pass<L, 1, KQ>(a + r, k, w, ldw, n, c + r * ldc, ldc);
    }
}

template <class L>
void stream_axpy(const float* const* a, int64_t m, const typename L::T* w, int64_t ldw, int64_t K, int64_t n, float* c,
                 int64_t ldc) {
    for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j) c[r * ldc + j] = 0.0f;
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) axpy_rows<L, 4>(a, m, k, w + k * ldw, ldw, n, c, ldc);
    for (; k < K; ++k) axpy_rows<L, 1>(a, m, k, w + k * ldw, ldw, n, c, ldc);
}

template <class L>
void stream_typed(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    const auto* w = static_cast<const typename L::T*>(b.data);
    if (b.transposed)
        stream_axpy<L>(a, m, w, b.ld, b.K, n, c, ldc);
    else
        stream_dot<L>(a, m, w, b.ld, b.K, n, c, ldc);
}

}  // namespace

#undef MOEX_INLINE

void stream_avx2(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    switch (b.dtype) {
        case DType::kBF16: return stream_typed<LoadBF16>(a, m, b, n, c, ldc);
        case DType::kF16: return stream_typed<LoadF16>(a, m, b, n, c, ldc);
        default: return stream_typed<LoadF32>(a, m, b, n, c, ldc);
    }
}

}  // namespace moex::cpu
