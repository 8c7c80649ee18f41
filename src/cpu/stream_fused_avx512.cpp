// AVX-512 (F/BW/VL/DQ + VBMI) decode GEMV for quantized weights, the AVX-512 table's stream_fused (its other entries
// are the AVX2 kernels): one zmm holds two rows of B, lanes 0-7 row j and 8-15 row j + 1, each half summing k = l mod 8
// in increasing k like the AVX2 dot kernel, so every output has the bits of the AVX2 stream on the dequantized rows.
// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands), not about this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "src/cpu/kernels.h"
#include "src/cpu/parallel.h"
#include "src/cpu/scalar_codecs_local.h"
#include "src/cpu/simd_avx2.h"

namespace moex::cpu {
namespace {

constexpr int kMaxPairs = 4;        // rows of B per tile: 2 * kMaxPairs
constexpr int kMaxRowsA = 6;        // rows of A per pass (more rows: passes over the same B rows, from L2)
constexpr int kMaxRowsStream = 24;  // the most rows of A taken: config.h stream_max_rows(false)
// Prefetch distance: each row of a tile fetches the same bytes of the row at least kAhead bytes and a whole number of
// tiles further on, into L2 (the bf16 dot kernel's scheme). 8 KiB from each row instead reaches only this tile and
// part of the next: one thread read FP8 at 5.1 GB/s from DRAM that way, 6.5-7.5 this way (9.8 from L2; 8-64 KiB and
// the T0/T1/T2 hints measured within the noise of a shared machine).
constexpr int64_t kAhead = 8192;
constexpr uint64_t kByte3 = 0x8888888888888888ull, kByte2 = 0x4444444444444444ull;  // byte masks of dword lanes

// Stores the tile's accumulators: pair p holds output 2p in its low half and 2p + 1 in its high half, each summed in
// the AVX2 kernel's order; only the first `stored` outputs exist.
template <int NP, int MB>
inline void store_pairs(const __m512 (&acc)[NP][MB], int stored, float* c, int64_t ldc) {
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p)
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb) {
            if (2 * p < stored) c[mb * ldc + 2 * p] = hsum8(_mm512_castps512_ps256(acc[p][mb]));
            if (2 * p + 1 < stored) c[mb * ldc + 2 * p + 1] = hsum8(_mm512_extractf32x8_ps(acc[p][mb], 1));
        }
}

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
    store_pairs(acc, stored, c, ldc);
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

// out[g] = group_scale(q, first + g) * mult for g < groups, 16 at a time: the same products (scale * global, then
// the exact power of two mult), the scalar decode only for the tail. One scalar decode per 16 FP4 weights (NVFP4)
// cost about as much as the whole vector decode of those weights.
void row_scales(const WeightQuant& q, int64_t first, int64_t groups, float mult, float* out) {
    const __m512 global = _mm512_set1_ps(q.global), mul = _mm512_set1_ps(mult);
    const __m512i nan = _mm512_set1_epi32(0x7fc00000);
    int64_t g = 0;
    for (; g + 16 <= groups; g += 16) {
        __m512 v;
        if (q.scale_dtype == DType::kF32) {
            v = _mm512_loadu_ps(static_cast<const float*>(q.scale) + first + g);
        } else {
            const __m512i b = _mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(q.scale) + first + g)));
            if (q.scale_dtype == DType::kFP8E4M3) {  // e4m3x8's biased decode, unbiased exactly; 0x7f/0xff NaN
                const __m512i f = _mm512_and_si512(_mm512_srai_epi32(_mm512_slli_epi32(b, 24), 4),
                                                   _mm512_set1_epi32(int32_t(0x87f00000u)));
                const __m512 u = _mm512_mul_ps(_mm512_mul_ps(_mm512_castsi512_ps(f), _mm512_set1_ps(0x1.0p60f)),
                                               _mm512_set1_ps(0x1.0p60f));
                const __mmask16 is_nan =
                    _mm512_cmpeq_epi32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7f)), _mm512_set1_epi32(0x7f));
                v = _mm512_mask_mov_ps(
                    u, is_nan,
                    _mm512_castsi512_ps(_mm512_or_si512(nan, _mm512_slli_epi32(_mm512_srli_epi32(b, 7), 31))));
            } else {  // UE8M0 (or U8 bytes): 2^(b - 127); 0 is 2^-127, 0xff NaN
                const __m512i e = _mm512_slli_epi32(b, 23);
                const __m512i z = _mm512_mask_mov_epi32(e, _mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512()),
                                                        _mm512_set1_epi32(0x00400000));
                v = _mm512_castsi512_ps(
                    _mm512_mask_mov_epi32(z, _mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(0xff)), nan));
            }
        }
        _mm512_storeu_ps(out + g, _mm512_mul_ps(_mm512_mul_ps(v, global), mul));
    }
    for (; g < groups; ++g) out[g] = group_scale(q, first + g) * mult;
}

// The rows [j, j + rows) of B (rows <= 2 * np) and their group scales (FP8: times the decoder's bias) into t, row r's
// at scales + r * (K / bk) (the thread's scratch: any number of groups; a fixed 512 per row had NVFP4 mixtral-8x7b's
// down projection, 896, dequantized instead, RESULTS X4); false where an FP8 scale would overflow with the bias
// (|s| >= 2^8).
template <bool Fp8>
bool fill_tile(const WeightMat& b, int64_t j, int rows, int np, float* scales, Tile& t) {
    const int64_t bk = b.q.bk < b.K ? b.q.bk : b.K, groups = b.K / bk;
    t.ahead = 2 * np * b.ld * (kAhead / (2 * np * b.ld) + 1);
    int64_t prev = -1;
    for (int r = 0; r < 2 * np; ++r) {
        const int64_t row = j + (r < rows ? r : rows - 1);
        t.row[r] = static_cast<const uint8_t*>(b.data) + row * b.ld;
        if (r >= rows) {  // a lone last row: its own partner
            t.scale[r] = t.scale[rows - 1];
            continue;
        }
        t.scale[r] = scales + r * groups;
        const int64_t srow = (b.q.row0 + row) / b.q.bn;
        if (r > 0 && srow == prev) {  // FP8 blocks: the rows of a tile share their scales
            t.scale[r] = t.scale[r - 1];
            continue;
        }
        prev = srow;
        row_scales(b.q, srow * b.q.ld, groups, Fp8 ? 0x1.0p120f : 1.0f, scales + r * groups);
        if (Fp8)  // s * 2^120 finite iff |s| < 2^8 and s is no NaN: else the AVX2 table's path and bits
            for (int64_t g = 0; g < groups; ++g)
                if (!std::isfinite(scales[r * groups + g])) return false;
    }
    return true;
}

// ---- FP4 weights against bf16 activations: vdpbf16ps ----
// When every value of A is a bf16 (bf16 hidden states, and h, rounded to bf16 before the down projection), codes and
// activations enter vdpbf16ps exactly (e2m1 is a bf16; the products are exact in f32) and each lane sums its k pairs
// per scale group in f32; the group sum is then scaled once (fma into the total), as the CUDA kernels promote their
// partial sums. So an output is Σ_g s_g·Σ_{k in g} code·a instead of Σ_k round(code·s_g)·a: no rounding of the weights,
// a few f32 ulps from the dequantized-weight path (tests: within 1e-5 of float64), the same bits for any m <= 24 and
// thread count. vdpbf16ps flushes bf16 subnormals (|a| < 2^-126) to zero. 32 weights cost vpmultishiftqb + vpermw +
// one vdpbf16ps per row of A, against 2 x (vpmultishiftqb + 2 vpermb + vmulps + vfmadd) in f32.

// Word w of a pair's FP4 source (load_pair) gets code w mod 16 of its row in its low nibble (both bytes of the word
// take the 8 bits at bit 4c of the row's qword), for vpermw.
inline __m512i bf16_control() {
    alignas(64) uint8_t ctl[64];
    for (int w = 0; w < 32; ++w) ctl[2 * w] = ctl[2 * w + 1] = uint8_t(4 * (w % 16));
    return _mm512_load_si512(ctl);
}

// e2m1 code (the low 4 of the 5 index bits vpermw reads) -> its bf16.
inline __m512i bf16_lut() {
    constexpr uint16_t kBf16[8] = {0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040, 0x4080, 0x40c0};
    alignas(64) uint16_t lut[32];
    for (int i = 0; i < 32; ++i) lut[i] = uint16_t(kBf16[i & 7] | ((i & 8) ? 0x8000 : 0));
    return _mm512_load_si512(lut);
}

// NP pairs of B rows against MB bf16 rows of A (a[mb][k], K contiguous): lane l of each half sums the k pairs
// (2l, 2l + 1) mod 16 of each scale group with vdpbf16ps, then adds group_sum * s with one fma, in increasing k.
template <int NP, int MB>
__attribute__((target("avx512bf16"))) void bf16_tile(const uint16_t* const* a, const Tile& t, int64_t K, int64_t bk,
                                                     float* c, int64_t ldc, int stored) {
    const __m512i ctl = bf16_control(), lut = bf16_lut();
    __m512 tot[NP][MB];
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p)
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb) tot[p][mb] = _mm512_setzero_ps();
    for (int64_t k0 = 0, g = 0; k0 < K; k0 += bk, ++g) {
        __m512 blk[NP][MB];
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p)
#pragma GCC unroll 6
            for (int mb = 0; mb < MB; ++mb) blk[p][mb] = _mm512_setzero_ps();
        for (int64_t k = k0; k < k0 + bk; k += 16) {
            if ((k & 127) == 0)
#pragma GCC unroll 8
                for (int r = 0; r < 2 * NP; ++r)
                    _mm_prefetch(reinterpret_cast<const char*>(t.row[r] + t.ahead + k / 2), _MM_HINT_T1);
            __m512bh av[MB];
#pragma GCC unroll 6
            for (int mb = 0; mb < MB; ++mb)
                av[mb] =
                    (__m512bh)_mm512_broadcast_i32x8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[mb] + k)));
#pragma GCC unroll 4
            for (int p = 0; p < NP; ++p) {
                const __m512i src = load_pair<false>(t.row[2 * p], t.row[2 * p + 1], k);
                const __m512bh w = (__m512bh)_mm512_permutexvar_epi16(_mm512_multishift_epi64_epi8(ctl, src), lut);
#pragma GCC unroll 6
                for (int mb = 0; mb < MB; ++mb) blk[p][mb] = _mm512_dpbf16_ps(blk[p][mb], w, av[mb]);
            }
        }
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) {
            const __m512 s = _mm512_mask_broadcastss_ps(_mm512_set1_ps(t.scale[2 * p][g]), 0xff00,
                                                        _mm_set_ss(t.scale[2 * p + 1][g]));
#pragma GCC unroll 6
            for (int mb = 0; mb < MB; ++mb) tot[p][mb] = _mm512_fmadd_ps(blk[p][mb], s, tot[p][mb]);
        }
    }
    store_pairs(tot, stored, c, ldc);
}

// A's rows as bf16 (k contiguous) when every value is one (its low 16 bits zero), for bf16_tile.
bool rows_as_bf16(const float* const* a, int64_t m, int64_t K, uint16_t* dst) {
    for (int64_t r = 0; r < m; ++r) {
        __m512i low = _mm512_setzero_si512();
        for (int64_t k = 0; k < K; k += 16) {
            const __m512i v = _mm512_loadu_si512(a[r] + k);
            low = _mm512_or_si512(low, v);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + r * K + k),
                                _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
        }
        if (_mm512_test_epi32_mask(low, _mm512_set1_epi32(0xffff)) != 0) return false;
    }
    return true;
}

// ---- drivers ----

enum class Kind { kFp8, kFp4, kFp4Bf16 };

// Rows [j, j + rows) of B, rows <= 2 * NP, against MB rows of A (f32 rows, or bf16 rows for kFp4Bf16).
template <Kind W, int NP, int MB>
bool rows_tile(const Decode& d, const void* const* a, const WeightMat& b, int64_t j, int rows, float* c, int64_t ldc) {
    constexpr bool kFp8 = W == Kind::kFp8;
    const int64_t bk = b.q.bk < b.K ? b.q.bk : b.K;
    Tile t;
    if (!fill_tile<kFp8>(b, j, rows, NP, thread_scratch(7, 2 * NP * (b.K / bk)), t)) return false;
    if constexpr (W == Kind::kFp4Bf16) {
        bf16_tile<NP, MB>(reinterpret_cast<const uint16_t* const*>(a), t, b.K, bk, c + j, ldc, rows);
    } else {
        pair_tile<kFp8, NP, MB>(d, reinterpret_cast<const float* const*>(a), t, b.K, bk, c + j, ldc, rows);
        if (kFp8)
            for (int r = 0; r < rows; ++r)
                if (has_nan(t.row[r], b.K))
                    for (int mb = 0; mb < MB; ++mb) c[mb * ldc + j + r] = bits_f32(0x7fc00000u);
    }
    return true;
}

template <Kind W, int NP, int MB>
bool all_rows(const Decode& d, const void* const* a, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    int64_t j = 0;
    for (; j + 2 * NP <= n; j += 2 * NP)
        if (!rows_tile<W, NP, MB>(d, a, b, j, 2 * NP, c, ldc)) return false;
    for (; j < n; j += 2)
        if (!rows_tile<W, 1, MB>(d, a, b, j, n - j < 2 ? 1 : 2, c, ldc)) return false;
    return true;
}

// Pairs of B rows per tile for MB rows of A, within the 32 zmm registers: f32 NP*MB accumulators + NP sources + NP
// scales + MB rows of A + 6 constants; bf16 2*NP*MB accumulators (group and total) + MB rows + 2 constants.
template <Kind W>
bool pass(const Decode& d, const void* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    constexpr bool kBf16 = W == Kind::kFp4Bf16;
    switch (m) {
        case 1: return all_rows<W, 4, 1>(d, a, b, n, c, ldc);
        case 2: return all_rows < W, kBf16 ? 3 : 4, 2 > (d, a, b, n, c, ldc);
        case 3: return all_rows < W, kBf16 ? 2 : 3, 3 > (d, a, b, n, c, ldc);
        case 4: return all_rows < W, kBf16 ? 2 : 3, 4 > (d, a, b, n, c, ldc);
        case 5: return all_rows < W, kBf16 ? 1 : 2, 5 > (d, a, b, n, c, ldc);
        default: return all_rows < W, kBf16 ? 1 : 2, 6 > (d, a, b, n, c, ldc);
    }
}

}  // namespace

bool stream_fused_avx512(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    const int64_t bk = b.q.bk < b.K ? b.q.bk : b.K;
    if (m < 1 || m > kMaxRowsStream || b.transposed || b.K % 16 != 0 || bk % 16 != 0) return false;
    static const bool has_bf16 = __builtin_cpu_supports("avx512bf16");
    Kind kind = b.q.format == QuantFormat::kFp8 ? Kind::kFp8 : Kind::kFp4;
    const void* const* rows = reinterpret_cast<const void* const*>(a);
    const uint16_t* bf16_rows[kMaxRowsStream];
    if (kind == Kind::kFp4 && has_bf16) {
        auto* buf = reinterpret_cast<uint16_t*>(thread_scratch(4, (m * b.K + 1) / 2));
        if (rows_as_bf16(a, m, b.K, buf)) {
            for (int64_t r = 0; r < m; ++r) bf16_rows[r] = buf + r * b.K;
            kind = Kind::kFp4Bf16, rows = reinterpret_cast<const void* const*>(bf16_rows);
        }
    }
    const Decode d{fp8_index(0), fp8_index(1), fp4_control(0), fp4_control(1), fp4_lut(3), fp4_lut(2)};
    for (int64_t r = 0; r < m; r += kMaxRowsA) {
        const int64_t mr = m - r < kMaxRowsA ? m - r : kMaxRowsA;
        float* cr = c + r * ldc;
        const bool ok = kind == Kind::kFp8   ? pass<Kind::kFp8>(d, rows + r, mr, b, n, cr, ldc)
                        : kind == Kind::kFp4 ? pass<Kind::kFp4>(d, rows + r, mr, b, n, cr, ldc)
                                             : pass<Kind::kFp4Bf16>(d, rows + r, mr, b, n, cr, ldc);
        if (!ok) return false;
    }
    return true;
}

}  // namespace moex::cpu
