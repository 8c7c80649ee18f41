// AVX-512 (F/BW/VL/DQ + VBMI) decode GEMV for quantized weights, the AVX-512 table's stream_fused (its other entries
// are the AVX2 kernels): one zmm holds two rows of B, lanes 0-7 row j and 8-15 row j + 1, each half summing k = l mod 8
// in increasing k like the AVX2 dot kernel, so every output has the bits of the AVX2 stream on the dequantized rows.
// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands), not about this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "src/cpu/config.h"
#include "src/cpu/kernels.h"
#include "src/cpu/simd_avx2.h"

namespace moex::cpu {
namespace {

// File-local scalar codecs (no inline function shared with portable code is compiled here with AVX-512 enabled).
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

float group_scale(const WeightQuant& q, int64_t i) {
    float s;
    switch (q.scale_dtype) {
        case DType::kF32: s = static_cast<const float*>(q.scale)[i]; break;
        case DType::kFP8E4M3: s = e4m3_value(static_cast<const uint8_t*>(q.scale)[i]); break;
        default: s = ue8m0_value(static_cast<const uint8_t*>(q.scale)[i]); break;
    }
    return s * q.global;
}

constexpr int kMaxPairs = 4;     // rows of B per tile: 2 * kMaxPairs
constexpr int kMaxRowsA = 6;     // rows of A per pass (more rows: passes over the same B rows, from L2)
constexpr int kMaxGroups = 512;  // scale groups per row a tile keeps (K / bk); more: the caller's dequant path
// Prefetch distance: each row of a tile fetches the same bytes of the row at least kAhead bytes and a whole number of
// tiles further on, into L2 (the bf16 dot kernel's scheme). 8 KiB from each row instead reaches only this tile and
// part of the next: one thread read FP8 at 5.1 GB/s from DRAM that way, 6.5-7.5 this way (9.8 from L2; 8-64 KiB and
// the T0/T1/T2 hints measured within the noise of a shared machine).
constexpr int64_t kAhead = 8192;
constexpr uint64_t kByte3 = 0x8888888888888888ull, kByte2 = 0x4444444444444444ull;  // byte masks of dword lanes

// The byte index of each dword lane's top byte for vpermb: lane i takes code k + 8h + i of row 0 (i < 8, bytes 0-15
// of the source) or of row 1 (i >= 8, bytes 16-31).
inline __m512i fp8_index(int h) {
    alignas(64) uint8_t idx[64] = {};
    for (int i = 0; i < 16; ++i) idx[4 * i + 3] = uint8_t((i < 8 ? i : 16 + i - 8) + 8 * h);
    return _mm512_load_si512(idx);
}

// vpmultishiftqb control: bytes 2 and 3 of dword lane i get the 8 bits at bit 4c of its qword (code c = i mod 8 +
// 8h of that row's 16 codes, low nibble first), so their low nibble is code c.
inline __m512i fp4_control(int h) {
    alignas(64) uint8_t ctl[64] = {};
    for (int i = 0; i < 16; ++i) ctl[4 * i + 2] = ctl[4 * i + 3] = uint8_t(4 * (i % 8 + 8 * h));
    return _mm512_load_si512(ctl);
}

// e2m1 code -> byte 3 (byte == 3) or byte 2 of its f32 (0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 the sign, code 8 is -0),
// indexed by the low 6 bits of a byte of which only the low 4 are the code.
inline __m512i fp4_lut(int byte) {
    constexpr uint32_t kF32[8] = {0x00000000u, 0x3f000000u, 0x3f800000u, 0x3fc00000u,
                                  0x40000000u, 0x40400000u, 0x40800000u, 0x40c00000u};
    alignas(64) uint8_t lut[64];
    for (int i = 0; i < 64; ++i) {
        const int c = i & 15;
        lut[i] = uint8_t((kF32[c & 7] | (c & 8 ? 0x80000000u : 0u)) >> (8 * byte));
    }
    return _mm512_load_si512(lut);
}

struct Decode {
    __m512i idx0, idx1, ctl0, ctl1, lut3, lut2;
};

// 16 codes of each row of a pair at k, as the source of decode(): FP8 bytes 0-15 row 0 and 16-31 row 1; FP4 the
// 8 bytes of row 0 in qwords 0-3 and of row 1 in qwords 4-7.
template <bool Fp8>
inline __m512i load_pair(const uint8_t* r0, const uint8_t* r1, int64_t k) {
    if constexpr (Fp8) {
        const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + k));
        const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1 + k));
        return _mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1));
    }
    const __m512i lo = _mm512_broadcastq_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(r0 + k / 2)));
    return _mm512_mask_broadcastq_epi64(lo, 0xf0, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r1 + k / 2)));
}

// Half h (codes 8h..8h+7 of each row) of a pair's source as 16 f32: FP8 carries the decoder's 2^-120 (the sign-
// extending shift leaves the 7 value bits where an f32's low exponent and top mantissa bits are; code 0x7f decodes
// finite and is caught by has_nan), FP4 is exact.
template <bool Fp8>
inline __m512 decode(const Decode& d, __m512i src, int h) {
    if constexpr (Fp8) {
        const __m512i t = _mm512_maskz_permutexvar_epi8(kByte3, h ? d.idx1 : d.idx0, src);  // code << 24
        return _mm512_castsi512_ps(_mm512_and_si512(_mm512_srai_epi32(t, 4), _mm512_set1_epi32(int32_t(0x87ffffffu))));
    }
    const __m512i x = _mm512_multishift_epi64_epi8(h ? d.ctl1 : d.ctl0, src);
    const __m512i f = _mm512_maskz_permutexvar_epi8(kByte3, x, d.lut3);
    return _mm512_castsi512_ps(_mm512_mask_permutexvar_epi8(f, kByte2, x, d.lut2));
}

// The rows of B one tile reads: pair p is rows (row[2p], row[2p + 1]); a lone last row is its own partner.
struct Tile {
    const uint8_t* row[2 * kMaxPairs];
    int64_t ahead;                      // bytes from a row to the one it prefetches
    const float* scale[2 * kMaxPairs];  // each row's group scales, times the decoder's bias
};

// NP pairs of B rows against MB rows of A; K and bk are multiples of 16. The order of each output is the AVX2 dot
// kernel's: lane l of each half sums k = l mod 8 in increasing k, one fma per element, then the pairwise lane sum.
template <bool Fp8, int NP, int MB>
void pair_tile(const Decode& dref, const float* const* a, const Tile& t, int64_t K, int64_t bk, float* c, int64_t ldc,
               int stored) {
    const Decode d = dref;  // the constants in registers (the __m512i members may alias the stores to c)
    __m512 acc[NP][MB];
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p)
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb) acc[p][mb] = _mm512_setzero_ps();
    const int64_t line = Fp8 ? 64 : 128;  // k per 64-byte line of codes
    for (int64_t k0 = 0, g = 0; k0 < K; k0 += bk, ++g) {
        __m512 s[NP];
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p)
            s[p] = _mm512_mask_broadcastss_ps(_mm512_set1_ps(t.scale[2 * p][g]), 0xff00,
                                              _mm_set_ss(t.scale[2 * p + 1][g]));
        for (int64_t k = k0; k < k0 + bk; k += 16) {
            if ((k & (line - 1)) == 0)
#pragma GCC unroll 8
                for (int r = 0; r < 2 * NP; ++r)
                    _mm_prefetch(reinterpret_cast<const char*>(t.row[r] + t.ahead + (Fp8 ? k : k / 2)), _MM_HINT_T1);
            __m512i src[NP];
#pragma GCC unroll 4
            for (int p = 0; p < NP; ++p) src[p] = load_pair<Fp8>(t.row[2 * p], t.row[2 * p + 1], k);
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
                __m512 av[MB];
#pragma GCC unroll 6
                for (int mb = 0; mb < MB; ++mb) av[mb] = _mm512_broadcast_f32x8(_mm256_loadu_ps(a[mb] + k + 8 * h));
#pragma GCC unroll 4
                for (int p = 0; p < NP; ++p) {
                    const __m512 w = _mm512_mul_ps(decode<Fp8>(d, src[p], h), s[p]);
#pragma GCC unroll 6
                    for (int mb = 0; mb < MB; ++mb) acc[p][mb] = _mm512_fmadd_ps(w, av[mb], acc[p][mb]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p)
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb) {
            if (2 * p < stored) c[mb * ldc + 2 * p] = hsum8(_mm512_castps512_ps256(acc[p][mb]));
            if (2 * p + 1 < stored) c[mb * ldc + 2 * p + 1] = hsum8(_mm512_extractf32x8_ps(acc[p][mb], 1));
        }
}

// Any e4m3 NaN code (0x7f or 0xff) in the row: its outputs are NaN whatever A holds (fma propagates NaN).
bool has_nan(const uint8_t* row, int64_t K) {
    const __m512i m7f = _mm512_set1_epi8(0x7f);
    __mmask64 any = 0;
    int64_t k = 0;
    for (; k + 64 <= K; k += 64) any |= _mm512_cmpeq_epi8_mask(_mm512_and_si512(_mm512_loadu_si512(row + k), m7f), m7f);
    if (k < K) {
        const __m512i v = _mm512_maskz_loadu_epi8(~uint64_t(0) >> (64 - (K - k)), row + k);
        any |= _mm512_cmpeq_epi8_mask(_mm512_and_si512(v, m7f), m7f);
    }
    return any != 0;
}

// Rows [j, j + rows) of B, rows <= 2 * NP, against MB rows of A; false where a row has more scale groups than a tile
// keeps, or an FP8 scale would overflow with the decoder's bias folded in (|s| >= 2^8).
template <bool Fp8, int NP, int MB>
bool rows_tile(const Decode& d, const float* const* a, const WeightMat& b, int64_t j, int rows, float* c, int64_t ldc) {
    const int64_t K = b.K, bk = b.q.bk < K ? b.q.bk : K, groups = K / bk;
    if (groups > kMaxGroups) return false;
    alignas(64) float scales[2 * NP][kMaxGroups];
    Tile t;
    t.ahead = 2 * NP * b.ld * (kAhead / (2 * NP * b.ld) + 1);
    for (int r = 0; r < 2 * NP; ++r) {
        const int64_t row = j + (r < rows ? r : rows - 1);
        t.row[r] = static_cast<const uint8_t*>(b.data) + row * b.ld;
        t.scale[r] = scales[r];
        if (r >= rows) {
            t.scale[r] = scales[rows - 1];
            continue;
        }
        const int64_t first = ((b.q.row0 + row) / b.q.bn) * b.q.ld;
        for (int64_t g = 0; g < groups; ++g) {
            const float sg = group_scale(b.q, first + g);
            if (Fp8 && !(std::fabs(sg) < 256.0f)) return false;  // NaN too: the AVX2 table's path and bits
            scales[r][g] = Fp8 ? sg * 0x1.0p120f : sg;
        }
    }
    pair_tile<Fp8, NP, MB>(d, a, t, K, bk, c + j, ldc, rows);
    if (Fp8)
        for (int r = 0; r < rows; ++r)
            if (has_nan(t.row[r], K))
                for (int mb = 0; mb < MB; ++mb) c[mb * ldc + j + r] = bits_f32(0x7fc00000u);
    return true;
}

template <bool Fp8, int NP, int MB>
bool all_rows(const Decode& d, const float* const* a, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    int64_t j = 0;
    for (; j + 2 * NP <= n; j += 2 * NP)
        if (!rows_tile<Fp8, NP, MB>(d, a, b, j, 2 * NP, c, ldc)) return false;
    for (; j < n; j += 2)
        if (!rows_tile<Fp8, 1, MB>(d, a, b, j, n - j < 2 ? 1 : 2, c, ldc)) return false;
    return true;
}

// Pairs of B rows per tile for MB rows of A: NP*MB accumulators + NP sources + NP scales + MB rows of A + 6 constants
// within the 32 zmm registers.
template <bool Fp8>
bool pass(const Decode& d, const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    switch (m) {
        case 1: return all_rows<Fp8, 4, 1>(d, a, b, n, c, ldc);
        case 2: return all_rows<Fp8, 4, 2>(d, a, b, n, c, ldc);
        case 3: return all_rows<Fp8, 3, 3>(d, a, b, n, c, ldc);
        case 4: return all_rows<Fp8, 3, 4>(d, a, b, n, c, ldc);
        case 5: return all_rows<Fp8, 2, 5>(d, a, b, n, c, ldc);
        default: return all_rows<Fp8, 2, 6>(d, a, b, n, c, ldc);
    }
}

}  // namespace

bool stream_fused_avx512(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    const int64_t bk = b.q.bk < b.K ? b.q.bk : b.K;
    if (m < 1 || m > stream_max_rows(false) || b.transposed || b.K % 16 != 0 || bk % 16 != 0) return false;
    const bool fp8 = b.q.format == QuantFormat::kFp8;
    const Decode d{fp8_index(0), fp8_index(1), fp4_control(0), fp4_control(1), fp4_lut(3), fp4_lut(2)};
    for (int64_t r = 0; r < m; r += kMaxRowsA) {
        const int64_t mr = m - r < kMaxRowsA ? m - r : kMaxRowsA;
        if (!(fp8 ? pass<true>(d, a + r, mr, b, n, c + r * ldc, ldc)
                  : pass<false>(d, a + r, mr, b, n, c + r * ldc, ldc)))
            return false;
    }
    return true;
}

}  // namespace moex::cpu
