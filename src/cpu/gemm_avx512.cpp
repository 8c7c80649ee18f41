// AVX-512 GEMM microkernels of the AVX-512 table: a 12x32 f32 tile (two 16-wide panels, 24 zmm accumulators) whose
// outputs are the AVX2 6x16 kernel's in-order fma chains (the same bits), and, where the CPU has AVX512_BF16, a 12x32
// vdpbf16ps tile on bf16 A and bf16 B panels of k pairs (twice the f32 tile's products per instruction).
// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands), not about this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "src/cpu/kernels.h"
#include "src/cpu/transpose_avx512.h"

namespace moex::cpu {
namespace {

constexpr int kMr512 = 12, kNr512 = 32;  // the tile: 12 x 32 f32 = 24 of the 32 zmm registers

inline __mmask16 lanes16(int n) {
    return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// B sources of the f32 tile: load(k, b0, b1) gives columns 0-15 and 16-31 of B's k-th row of the tile.
struct PackedB {  // two consecutive [kc][16] f32 panels of pack_b (the second one only read when nr > 16)
    const float* panel;
    int64_t stride;  // kc * 16: the second panel
    void load(int64_t k, __m512& b0, __m512& b1) const {
        b0 = _mm512_load_ps(panel + k * kNr), b1 = _mm512_load_ps(panel + stride + k * kNr);
    }
};

// Transposed weights in place: row k at w + k * ld, nr <= 32 columns, widened on the fly (zeros past nr).
template <DType D>
struct DirectB {
    const void* w;
    int64_t ld;
    __mmask16 m0, m1;
    static __m512 widen(const void* p, int64_t i, __mmask16 m) {
        if constexpr (D == DType::kF32) {
            return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
        } else {
            const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i);
            if constexpr (D == DType::kF16) return _mm512_cvtph_ps(h);
            return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
    }
    void load(int64_t k, __m512& b0, __m512& b1) const { b0 = widen(w, k * ld, m0), b1 = widen(w, k * ld + 16, m1); }
};

// MR x 32 f32 tile: c = fma chain over k in increasing order, from C (acc) or 0; NP = 1 keeps one panel (nr <= 16).
template <int MR, int NP, class B>
void f32_tile(const float* const* a, int64_t k0, const B& bsrc, int64_t kc, float* c, int64_t ldc, int nr, bool acc) {
    const __mmask16 m0 = lanes16(nr), m1 = lanes16(nr - 16);
    __m512 c0[MR], c1[MR];
    const float* ap[MR];
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
        ap[r] = a[r] + k0;
        c0[r] = acc ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
        if constexpr (NP == 2) c1[r] = acc ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
    }
#pragma GCC unroll 2
    for (int64_t k = 0; k < kc; ++k) {
        __m512 b0, b1;
        bsrc.load(k, b0, b1);
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) {
            const __m512 av = _mm512_set1_ps(ap[r][k]);
            c0[r] = _mm512_fmadd_ps(av, b0, c0[r]);
            if constexpr (NP == 2) c1[r] = _mm512_fmadd_ps(av, b1, c1[r]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
        _mm512_mask_storeu_ps(c + r * ldc, m0, c0[r]);
        if constexpr (NP == 2) _mm512_mask_storeu_ps(c + r * ldc + 16, m1, c1[r]);
    }
}

template <int NP, class B>
void f32_rows(const float* const* a, int mr, int64_t k0, const B& bsrc, int64_t kc, float* c, int64_t ldc, int nr,
              bool acc) {
    switch (mr) {
        case 1: return f32_tile<1, NP>(a, k0, bsrc, kc, c, ldc, nr, acc);
        case 2: return f32_tile<2, NP>(a, k0, bsrc, kc, c, ldc, nr, acc);
        case 3: return f32_tile<3, NP>(a, k0, bsrc, kc, c, ldc, nr, acc);
        case 4: return f32_tile<4, NP>(a, k0, bsrc, kc, c, ldc, nr, acc);
        case 5: return f32_tile<5, NP>(a, k0, bsrc, kc, c, ldc, nr, acc);
        case 6: return f32_tile<6, NP>(a, k0, bsrc, kc, c, ldc, nr, acc);
        case 7: return f32_tile<7, NP>(a, k0, bsrc, kc, c, ldc, nr, acc);
        case 8: return f32_tile<8, NP>(a, k0, bsrc, kc, c, ldc, nr, acc);
        case 9: return f32_tile<9, NP>(a, k0, bsrc, kc, c, ldc, nr, acc);
        case 10: return f32_tile<10, NP>(a, k0, bsrc, kc, c, ldc, nr, acc);
        case 11: return f32_tile<11, NP>(a, k0, bsrc, kc, c, ldc, nr, acc);
        default: return f32_tile<12, NP>(a, k0, bsrc, kc, c, ldc, nr, acc);
    }
}

template <class B>
void f32_any(const float* const* a, int mr, int64_t k0, const B& bsrc, int64_t kc, float* c, int64_t ldc, int nr,
             bool acc) {
    if (nr > kNr) return f32_rows<2>(a, mr, k0, bsrc, kc, c, ldc, nr, acc);
    f32_rows<1>(a, mr, k0, bsrc, kc, c, ldc, nr, acc);
}

}  // namespace

void micro_avx512(const float* const* a, int mr, int64_t k0, const float* panel, int64_t kc, float* c, int64_t ldc,
                  int nr, bool acc) {
    f32_any(a, mr, k0, PackedB{panel, kc * kNr}, kc, c, ldc, nr, acc);
}

void micro_direct_avx512(const float* const* a, int mr, int64_t k0, const WeightMat& b, int64_t kc, float* c,
                         int64_t ldc, int nr, bool acc) {
    const int64_t off = k0 * b.ld * dtype_size(b.dtype);
    const void* w = static_cast<const char*>(b.data) + off;
    const __mmask16 m0 = lanes16(nr), m1 = lanes16(nr - 16);
    switch (b.dtype) {
        case DType::kBF16: return f32_any(a, mr, k0, DirectB<DType::kBF16>{w, b.ld, m0, m1}, kc, c, ldc, nr, acc);
        case DType::kF16: return f32_any(a, mr, k0, DirectB<DType::kF16>{w, b.ld, m0, m1}, kc, c, ldc, nr, acc);
        default: return f32_any(a, mr, k0, DirectB<DType::kF32>{w, b.ld, m0, m1}, kc, c, ldc, nr, acc);
    }
}

namespace {

// ---- bf16 x bf16: vdpbf16ps ----
// TUTORIAL: vdpbf16ps c, a, b adds to each f32 lane l the two products a.bf16[2l + 1]·b.bf16[2l + 1], then
// a.bf16[2l]·b.bf16[2l], each exact in f32 (8-bit significands), rounded once per addition, bf16 subnormals read as 0.
// With B packed as [k pair][16 columns] dwords (element k = 2j in the low half, 2j + 1 in the high) and A's pair j
// broadcast to every lane, lane l of a tile accumulator is column l's dot product summed in the order 1, 0, 3, 2, ...:
// a fixed order per (K, layout), so the bits do not depend on the rows, the tile or the thread count.

// Rows layout: row c of the panel is K-contiguous bf16, so 32 k of 16 rows are 16 zmm of 16 dword pairs, transposed
// into 16 pair rows of the panel. Tails (kc not a multiple of 32, rows past n) are masked loads: zeros.
void pack_rows_bf16(const uint16_t* w, int64_t ld, int64_t n, int64_t k0, int64_t kc, uint32_t* dst) {
    const int64_t kp = (kc + 1) / 2;
    for (int64_t p = 0; p < n; p += kNr, dst += kp * kNr) {
        for (int64_t kk = 0; kk < kc; kk += 32) {
            const int64_t left = kc - kk;
            const __mmask32 km = left >= 32 ? __mmask32(0xffffffffu) : __mmask32((1u << left) - 1);
            __m512i r[16];
            for (int i = 0; i < 16; ++i)
                r[i] = p + i < n ? _mm512_maskz_loadu_epi16(km, w + (p + i) * ld + k0 + kk) : _mm512_setzero_si512();
            transpose16(r);
            const int64_t pairs = (left >= 32 ? 32 : left + 1) / 2;
            for (int64_t j = 0; j < pairs; ++j) _mm512_store_si512(dst + (kk / 2 + j) * kNr, r[j]);
        }
    }
}

// Transposed layout: storage rows k and k + 1 hold 16 contiguous columns each; their bf16 interleave into dwords.
void pack_cols_bf16(const uint16_t* w, int64_t ld, int64_t n, int64_t k0, int64_t kc, uint32_t* dst) {
    const int64_t kp = (kc + 1) / 2;
    for (int64_t p = 0; p < n; p += kNr, dst += kp * kNr) {
        const __mmask16 m = lanes16(int(n - p));
        for (int64_t j = 0; j < kp; ++j) {
            const uint16_t* row = w + (k0 + 2 * j) * ld + p;
            const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row));
            const __m512i hi =
                2 * j + 1 < kc ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + ld)) : _mm512_setzero_si512();
            _mm512_store_si512(dst + j * kNr, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
        }
    }
}

}  // namespace

void pack_b_bf16_avx512(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, uint32_t* dst) {
    const auto* w = static_cast<const uint16_t*>(b.data);
    if (b.transposed)
        pack_cols_bf16(w, b.ld, n, k0, kc, dst);
    else
        pack_rows_bf16(w, b.ld, n, k0, kc, dst);
}

namespace {

template <int MR, int NP>
__attribute__((target("avx512bf16"))) void bf16_tile(const uint16_t* a, int64_t lda, int64_t k0, const uint32_t* panel,
                                                     int64_t kc, float* c, int64_t ldc, int nr, bool acc) {
    const __mmask16 m0 = lanes16(nr), m1 = lanes16(nr - 16);
    const int64_t kp = (kc + 1) / 2;
    const uint32_t* p1 = panel + kp * kNr;
    __m512 c0[MR], c1[MR];
    const uint32_t* ap[MR];  // pair j of row r (k0 even, A zero-padded to an even length)
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
        ap[r] = reinterpret_cast<const uint32_t*>(a + r * lda + k0);
        c0[r] = acc ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
        if constexpr (NP == 2) c1[r] = acc ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
    }
#pragma GCC unroll 2
    for (int64_t j = 0; j < kp; ++j) {
        const __m512bh b0 = (__m512bh)_mm512_load_si512(panel + j * kNr);
        __m512bh b1;
        if constexpr (NP == 2) b1 = (__m512bh)_mm512_load_si512(p1 + j * kNr);
#pragma GCC unroll 12
        for (int r = 0; r < MR; ++r) {
            uint32_t pair;
            std::memcpy(&pair, ap[r] + j, 4);
            const __m512bh av = (__m512bh)_mm512_set1_epi32(int(pair));
            c0[r] = _mm512_dpbf16_ps(c0[r], av, b0);
            if constexpr (NP == 2) c1[r] = _mm512_dpbf16_ps(c1[r], av, b1);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
        _mm512_mask_storeu_ps(c + r * ldc, m0, c0[r]);
        if constexpr (NP == 2) _mm512_mask_storeu_ps(c + r * ldc + 16, m1, c1[r]);
    }
}

template <int NP>
void bf16_rows(const uint16_t* a, int64_t lda, int mr, int64_t k0, const uint32_t* panel, int64_t kc, float* c,
               int64_t ldc, int nr, bool acc) {
    switch (mr) {
        case 1: return bf16_tile<1, NP>(a, lda, k0, panel, kc, c, ldc, nr, acc);
        case 2: return bf16_tile<2, NP>(a, lda, k0, panel, kc, c, ldc, nr, acc);
        case 3: return bf16_tile<3, NP>(a, lda, k0, panel, kc, c, ldc, nr, acc);
        case 4: return bf16_tile<4, NP>(a, lda, k0, panel, kc, c, ldc, nr, acc);
        case 5: return bf16_tile<5, NP>(a, lda, k0, panel, kc, c, ldc, nr, acc);
        case 6: return bf16_tile<6, NP>(a, lda, k0, panel, kc, c, ldc, nr, acc);
        case 7: return bf16_tile<7, NP>(a, lda, k0, panel, kc, c, ldc, nr, acc);
        case 8: return bf16_tile<8, NP>(a, lda, k0, panel, kc, c, ldc, nr, acc);
        case 9: return bf16_tile<9, NP>(a, lda, k0, panel, kc, c, ldc, nr, acc);
        case 10: return bf16_tile<10, NP>(a, lda, k0, panel, kc, c, ldc, nr, acc);
        case 11: return bf16_tile<11, NP>(a, lda, k0, panel, kc, c, ldc, nr, acc);
        default: return bf16_tile<12, NP>(a, lda, k0, panel, kc, c, ldc, nr, acc);
    }
}

}  // namespace

void micro_bf16_avx512(const uint16_t* a, int64_t lda, int mr, int64_t k0, const uint32_t* panel, int64_t kc, float* c,
                       int64_t ldc, int nr, bool acc) {
    if (nr > kNr) return bf16_rows<2>(a, lda, mr, k0, panel, kc, c, ldc, nr, acc);
    bf16_rows<1>(a, lda, mr, k0, panel, kc, c, ldc, nr, acc);
}

bool rows_bf16_avx512(const float* const* a, int64_t m, int64_t K, uint16_t* dst, int64_t ldd) {
    __m512i low = _mm512_setzero_si512();
    for (int64_t r = 0; r < m; ++r) {
        uint16_t* out = dst + r * ldd;
        for (int64_t k = 0; k < K; k += 16) {
            const __mmask16 mk = lanes16(int(K - k));
            const __m512i v = _mm512_maskz_loadu_epi32(mk, a[r] + k);
            low = _mm512_or_si512(low, v);
            _mm256_mask_storeu_epi16(out + k, mk, _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
        }
        for (int64_t k = K; k < ldd; ++k) out[k] = 0;
        if (_mm512_test_epi32_mask(low, _mm512_set1_epi32(0xffff)) != 0) return false;
    }
    return true;
}

namespace {

// f32_to_bf16 of 16 lanes: round to nearest even on the bits, NaNs quieted with their sign; vcvtneps2bf16 would flush
// f32 subnormals to zero, so the integer form keeps the scalar bits.
inline __m256i bf16_bits(__m512 f) {
    const __m512i u = _mm512_castps_si512(f), hi = _mm512_srli_epi32(u, 16);
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(hi, _mm512_set1_epi32(1)))),
        16);
    const __mmask16 nan =
        _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40))));
}

}  // namespace

// kernels.h to_bf16, sixteen at a time.
void to_bf16_avx512(const float* src, int64_t n, uint16_t* dst) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 mk = lanes16(int(std::min<int64_t>(n - i, 16)));
        _mm256_mask_storeu_epi16(dst + i, mk, bf16_bits(_mm512_maskz_loadu_ps(mk, src + i)));
    }
}

// kernels.h outer_bf16: each output row i, 64 columns at a time in four zmm, sums the m products P[r][i]·Q[r][j] as the
// f32 tile does (an fma chain over r from zero, so its bits), then rounds them as to_bf16.
void outer_bf16_avx512(const float* P, int64_t M, const float* Q, int64_t L, int64_t m, uint16_t* out) {
    for (int64_t i = 0; i < M; ++i) {
        uint16_t* o = out + i * L;
        for (int64_t j = 0; j < L; j += 64) {
            __mmask16 mk[4];
            __m512 acc[4];
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) {
                mk[t] = lanes16(int(std::min<int64_t>(L - j - 16 * t, 16)));
                acc[t] = _mm512_setzero_ps();
            }
            for (int64_t r = 0; r < m; ++r) {
                const __m512 p = _mm512_set1_ps(P[r * M + i]);
                const float* q = Q + r * L + j;
#pragma GCC unroll 4
                for (int t = 0; t < 4; ++t)
                    acc[t] = _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(mk[t], q + 16 * t), acc[t]);
            }
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) _mm256_mask_storeu_epi16(o + j + 16 * t, mk[t], bf16_bits(acc[t]));
        }
    }
}

// Rounded activation rows taken apart into their e4m3 codes as bf16 (kernels.h rows_codes): vcvtneps2bf16 of
// value / scale is the code when the value is one (checked by multiplying back).
__attribute__((target("avx512bf16"))) bool rows_codes_avx512(const float* const* a, const float* const* s, int64_t m,
                                                             int64_t K, int64_t group, uint16_t* dst, int64_t ldd,
                                                             float* st, int64_t ldst) {
    const int64_t groups = (K + group - 1) / group;
    for (int64_t r = 0; r < m; ++r) {
        uint16_t* out = dst + r * ldd;
        __mmask16 bad = 0;
        for (int64_t g = 0; g < groups; ++g) {
            const float scale = s[r][g];
            st[g * ldst + r] = scale;
            const __m512 sv = _mm512_set1_ps(scale), inv = _mm512_set1_ps(scale != 0.0f ? 1.0f / scale : 0.0f);
            const int64_t k1 = std::min(K, (g + 1) * group);
            for (int64_t k = g * group; k < k1; k += 16) {
                const __mmask16 mk = lanes16(int(std::min<int64_t>(k1 - k, 16)));
                const __m512 v = _mm512_maskz_loadu_ps(mk, a[r] + k);
                const auto code = (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(v, inv));  // RNE: the code, if v is one
                const __m512 back =
                    _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(code), 16)), sv);
                bad |= _mm512_mask_cmp_ps_mask(mk, back, v, _CMP_NEQ_UQ);
                _mm256_mask_storeu_epi16(out + k, mk, code);
            }
        }
        for (int64_t k = K; k < ldd; ++k) out[k] = 0;
        if (bad != 0) return false;
    }
    return true;
}

}  // namespace moex::cpu
