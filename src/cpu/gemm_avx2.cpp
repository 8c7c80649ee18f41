// AVX2 packed-GEMM kernels: B packing (widen to f32, transpose K-contiguous rows into [k][16] panels) and the 6x16
// register-blocked microkernel, plus the AVX2 kernel table. Peak on Zen 3: 2 FMA pipes x 8 lanes x 2 = 32 flop/cycle.
#include <cmath>

#include "src/cpu/kernels.h"
#include "src/cpu/simd_avx2.h"

namespace moex::cpu {

void stream_avx2(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc);
void gate_row_avx2(const GateOp& op, const float* g, const float* u, int64_t n, float* h);
void dequant_avx2(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, float* dst, int64_t ldd);
bool stream_fused_avx2(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc);

namespace {

// In-register 8x8 transpose: r[i] holds row i, on return r[i] holds column i.
inline void transpose8(__m256 r[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 4; ++i) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; ++i) {
        s[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; ++i) {
        r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
    }
}

// Rows layout: B row n0+c is K-contiguous. Each 8 rows x 8 k block is widened, transposed and stored as 8 k-rows
// of one half of the 16-wide panel. Rows c >= n read as zeros.
template <class L>
void pack_rows(const typename L::T* w, int64_t ld, int64_t n, int64_t k0, int64_t kc, float* dst) {
    for (int64_t p = 0; p < n; p += kNr, dst += kc * kNr) {
        for (int half = 0; half < 2; ++half) {
            const int64_t r0 = p + 8 * half;
            int64_t kk = 0;
            for (; kk + 8 <= kc; kk += 8) {
                __m256 r[8];
                for (int i = 0; i < 8; ++i)
                    r[i] = r0 + i < n ? L::load8(w + (r0 + i) * ld + k0 + kk) : _mm256_setzero_ps();
                transpose8(r);
                for (int i = 0; i < 8; ++i) _mm256_store_ps(dst + (kk + i) * kNr + 8 * half, r[i]);
            }
            for (; kk < kc; ++kk) {  // k tail: one column at a time
                alignas(32) float col[8];
                for (int i = 0; i < 8; ++i) {
                    const auto* src = w + (r0 + i) * ld + k0 + kk;
                    col[i] = r0 + i < n ? _mm256_cvtss_f32(L::load_n(src, 1)) : 0.0f;
                }
                _mm256_store_ps(dst + kk * kNr + 8 * half, _mm256_load_ps(col));
            }
        }
    }
}

// Transposed layout: panel row kk is 16 contiguous elements of B's storage row k0+kk.
template <class L>
void pack_cols(const typename L::T* w, int64_t ld, int64_t n, int64_t k0, int64_t kc, float* dst) {
    for (int64_t p = 0; p < n; p += kNr, dst += kc * kNr) {
        const int64_t c0 = min64(8, n - p), c1 = n - p > 8 ? min64(8, n - p - 8) : 0;
        for (int64_t kk = 0; kk < kc; ++kk) {
            const auto* src = w + (k0 + kk) * ld + p;
            _mm256_store_ps(dst + kk * kNr, c0 == 8 ? L::load8(src) : L::load_n(src, c0));
            _mm256_store_ps(dst + kk * kNr + 8, c1 == 8  ? L::load8(src + 8)
                                                : c1 > 0 ? L::load_n(src + 8, c1)
                                                         : _mm256_setzero_ps());
        }
    }
}

template <class L>
void pack_typed(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, float* dst) {
    const auto* w = static_cast<const typename L::T*>(b.data);
    if (b.transposed)
        pack_cols<L>(w, b.ld, n, k0, kc, dst);
    else
        pack_rows<L>(w, b.ld, n, k0, kc, dst);
}

void pack_b_avx2(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, float* dst) {
    switch (b.dtype) {
        case DType::kBF16: return pack_typed<LoadBF16>(b, n, k0, kc, dst);
        case DType::kF16: return pack_typed<LoadF16>(b, n, k0, kc, dst);
        default: return pack_typed<LoadF32>(b, n, k0, kc, dst);
    }
}

// B sources of the microkernel: load(k, b0, b1) gives columns 0-7 and 8-15 of B's k-th row of the tile.
struct PackedB {  // a [kc][16] f32 panel from pack_b
    const float* panel;
    void load(int64_t k, __m256& b0, __m256& b1) const {
        b0 = _mm256_load_ps(panel + k * kNr), b1 = _mm256_load_ps(panel + k * kNr + 8);
    }
};

template <class L>
struct DirectB {  // transposed weights in place: row k at w + k*ld, nr <= 16 columns, widened on the fly
    const typename L::T* w;
    int64_t ld;
    int nr;
    void load(int64_t k, __m256& b0, __m256& b1) const {
        const typename L::T* row = w + k * ld;
        if (nr == kNr) {
            b0 = L::load8(row), b1 = L::load8(row + 8);
        } else {
            b0 = nr >= 8 ? L::load8(row) : L::load_n(row, nr);
            b1 = nr > 8 ? L::load_n(row + 8, nr - 8) : _mm256_setzero_ps();
        }
    }
};

// MR x 16 tile: 2*MR accumulators, 2 B loads and MR broadcasts per k; 12 fmas per 8 loads at MR = 6.
template <int MR, class B>
void micro_tile(const float* const* a, int64_t k0, const B& bsrc, int64_t kc, float* c, int64_t ldc, int nr, bool acc) {
    const __m256i m0 = first_lanes(nr < 8 ? nr : 8), m1 = first_lanes(nr > 8 ? nr - 8 : 0);
    const bool full = nr == kNr;
    __m256 c0[MR], c1[MR];
    const float* ap[MR];
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
        ap[r] = a[r] + k0;
        if (!acc) {
            c0[r] = c1[r] = _mm256_setzero_ps();
        } else if (full) {
            c0[r] = _mm256_loadu_ps(c + r * ldc), c1[r] = _mm256_loadu_ps(c + r * ldc + 8);
        } else {
            c0[r] = _mm256_maskload_ps(c + r * ldc, m0), c1[r] = _mm256_maskload_ps(c + r * ldc + 8, m1);
        }
    }
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; ++k) {
        __m256 b0, b1;
        bsrc.load(k, b0, b1);
#pragma GCC unroll 6
        for (int r = 0; r < MR; ++r) {
            const __m256 av = _mm256_broadcast_ss(ap[r] + k);
            c0[r] = _mm256_fmadd_ps(av, b0, c0[r]);
            c1[r] = _mm256_fmadd_ps(av, b1, c1[r]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
        if (full) {
            _mm256_storeu_ps(c + r * ldc, c0[r]), _mm256_storeu_ps(c + r * ldc + 8, c1[r]);
        } else {
            _mm256_maskstore_ps(c + r * ldc, m0, c0[r]), _mm256_maskstore_ps(c + r * ldc + 8, m1, c1[r]);
        }
    }
}

template <class B>
void micro_rows(const float* const* a, int mr, int64_t k0, const B& bsrc, int64_t kc, float* c, int64_t ldc, int nr,
                bool acc) {
    switch (mr) {
        case 1: return micro_tile<1>(a, k0, bsrc, kc, c, ldc, nr, acc);
        case 2: return micro_tile<2>(a, k0, bsrc, kc, c, ldc, nr, acc);
        case 3: return micro_tile<3>(a, k0, bsrc, kc, c, ldc, nr, acc);
        case 4: return micro_tile<4>(a, k0, bsrc, kc, c, ldc, nr, acc);
        case 5: return micro_tile<5>(a, k0, bsrc, kc, c, ldc, nr, acc);
        default: return micro_tile<6>(a, k0, bsrc, kc, c, ldc, nr, acc);
    }
}

void micro_avx2(const float* const* a, int mr, int64_t k0, const float* panel, int64_t kc, float* c, int64_t ldc,
                int nr, bool acc) {
    micro_rows(a, mr, k0, PackedB{panel}, kc, c, ldc, nr, acc);
}

void micro_direct_avx2(const float* const* a, int mr, int64_t k0, const WeightMat& b, int64_t kc, float* c, int64_t ldc,
                       int nr, bool acc) {
    const int64_t off = k0 * b.ld;
    switch (b.dtype) {
        case DType::kBF16: {
            const DirectB<LoadBF16> src{static_cast<const uint16_t*>(b.data) + off, b.ld, nr};
            return micro_rows(a, mr, k0, src, kc, c, ldc, nr, acc);
        }
        case DType::kF16: {
            const DirectB<LoadF16> src{static_cast<const uint16_t*>(b.data) + off, b.ld, nr};
            return micro_rows(a, mr, k0, src, kc, c, ldc, nr, acc);
        }
        default: {
            const DirectB<LoadF32> src{static_cast<const float*>(b.data) + off, b.ld, nr};
            return micro_rows(a, mr, k0, src, kc, c, ldc, nr, acc);
        }
    }
}

}  // namespace

namespace {

// f32_to_bf16 of 8 lanes (simd_avx2.h round_bf16) as 8 packed 16-bit values.
inline __m128i bf16_bits8(__m256 f) {
    const __m256i v = _mm256_srli_epi32(_mm256_castps_si256(round_bf16(f)), 16);
    // Every lane is below 2^16, so the unsigned saturation of packus keeps it.
    return _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

}  // namespace

// kernels.h to_bf16, eight at a time.
void to_bf16_avx2(const float* src, int64_t n, uint16_t* dst) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), bf16_bits8(_mm256_loadu_ps(src + i)));
    for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

// kernels.h outer_bf16: each output row i, 32 columns at a time in four ymm, sums the m products as the AVX2 tile does
// (an fma chain over r from zero, so its bits), then rounds them as to_bf16; the last columns one by one.
void outer_bf16_avx2(const float* P, int64_t M, const float* Q, int64_t L, int64_t m, uint16_t* out) {
    for (int64_t i = 0; i < M; ++i) {
        uint16_t* o = out + i * L;
        int64_t j = 0;
        for (; j + 32 <= L; j += 32) {
            __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int64_t r = 0; r < m; ++r) {
                const __m256 p = _mm256_set1_ps(P[r * M + i]);
                const float* q = Q + r * L + j;
#pragma GCC unroll 4
                for (int t = 0; t < 4; ++t) acc[t] = _mm256_fmadd_ps(p, _mm256_loadu_ps(q + 8 * t), acc[t]);
            }
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) _mm_storeu_si128(reinterpret_cast<__m128i*>(o + j + 8 * t), bf16_bits8(acc[t]));
        }
        for (; j < L; ++j) {
            float c = 0.0f;
            for (int64_t r = 0; r < m; ++r) c = std::fma(P[r * M + i], Q[r * L + j], c);
            o[j] = f32_to_bf16(c);
        }
    }
}

extern const KernelTable kAvx2Table;
const KernelTable kAvx2Table{.name = "avx2",
                             .stream = stream_avx2,
                             .pack_b = pack_b_avx2,
                             .mr = 6,
                             .nr = kNr,
                             .micro = micro_avx2,
                             .micro_direct = micro_direct_avx2,
                             .dequant = dequant_avx2,
                             .stream_fused = stream_fused_avx2,
                             .gate_row = gate_row_avx2,
                             .to_bf16 = to_bf16_avx2,
                             .outer_bf16 = outer_bf16_avx2};

}  // namespace moex::cpu
