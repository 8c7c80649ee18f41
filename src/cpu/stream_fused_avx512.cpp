// AVX-512 (F/BW/VL/DQ + VBMI) decode GEMV for quantized weights, the AVX-512 table's stream_fused (its other entries
// are the AVX2 kernels): one zmm holds two rows of B, lanes 0-7 row j and 8-15 row j + 1, each half summing k = l mod 8
// in increasing k like the AVX2 dot kernel, so every output has the bits of the AVX2 stream on the dequantized rows.
// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands), not about this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <array>
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
    int64_t ahead;                        // bytes from a row to the one it prefetches
    const float* scale[2 * kMaxPairs];    // each row's group scales, times the decoder's bias
    const uint8_t* ue8m0[2 * kMaxPairs];  // or (fill_tile's bytes) each row's UE8M0 scale bytes, decoded in the loop
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

// out[g] = group_scale(q, first + g) * mult for g < groups, 16 at a time, the tail masked: the same products (scale *
// global, then the exact power of two mult). One scalar decode per 16 FP4 weights (NVFP4) cost about as much as the
// whole vector decode of those weights; the scalar tail alone took a quarter of an MXFP4 GEMV at K = 768 (24 groups).
void row_scales(const WeightQuant& q, int64_t first, int64_t groups, float mult, float* out) {
    const __m512 global = _mm512_set1_ps(q.global), mul = _mm512_set1_ps(mult);
    const __m512i nan = _mm512_set1_epi32(0x7fc00000);
    for (int64_t g = 0; g < groups; g += 16) {
        const __mmask16 live = groups - g >= 16 ? __mmask16(0xffff) : __mmask16((1u << (groups - g)) - 1);
        __m512 v;
        if (q.scale_dtype == DType::kF32) {
            v = _mm512_maskz_loadu_ps(live, static_cast<const float*>(q.scale) + first + g);
        } else {
            // Lanes past the row read 127 (2^0): a 0 byte there would decode to the subnormal 2^-127, and the
            // multiplies below take a microcode assist per subnormal vector (the whole GEMV 3x slower at K = 768).
            const __m512i b =
                _mm512_mask_cvtepu8_epi32(_mm512_set1_epi32(127), live,
                                          _mm_maskz_loadu_epi8(live, static_cast<const uint8_t*>(q.scale) + first + g));
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
        _mm512_mask_storeu_ps(out + g, live, _mm512_mul_ps(_mm512_mul_ps(v, global), mul));
    }
}

// Whether n UE8M0 bytes are all normal scales, 2^-126 .. 2^127, whose f32 bits are e << 23 (0 is the subnormal
// 2^-127, 0xff NaN).
bool ue8m0_normal(const uint8_t* p, int64_t n) {
    for (int64_t i = 0; i < n; i += 64) {
        const __mmask64 live = n - i >= 64 ? ~uint64_t(0) : ~uint64_t(0) >> (64 - (n - i));
        const __m512i v = _mm512_maskz_loadu_epi8(live, p + i);
        if ((_mm512_cmpeq_epi8_mask(v, _mm512_setzero_si512()) | _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(-1))) &
            live)
            return false;
    }
    return true;
}

// The rows [j, j + rows) of B (rows <= slots) and their group scales (FP8: times the decoder's bias) into t, row r's
// at scales + r * (K / bk) (the thread's scratch: any number of groups; a fixed 512 per row had NVFP4 mixtral-8x7b's
// down projection, 896, dequantized instead, RESULTS X4); false where an FP8 scale would overflow with the bias
// (|s| >= 2^8). Bytes (UE8M0 scales, no global): each row's scale bytes instead (t.ue8m0, scales unused); false where
// one is not normal.
template <bool Fp8>
bool fill_tile(const WeightMat& b, int64_t j, int rows, int slots, float* scales, Tile& t, bool bytes = false) {
    const int64_t bk = b.q.bk < b.K ? b.q.bk : b.K, groups = b.K / bk;
    t.ahead = slots * b.ld * (kAhead / (slots * b.ld) + 1);
    int64_t prev = -1;
    for (int r = 0; r < slots; ++r) {
        const int64_t row = j + (r < rows ? r : rows - 1);
        t.row[r] = static_cast<const uint8_t*>(b.data) + row * b.ld;
        if (r >= rows) {  // a lone last row: its own partner
            t.scale[r] = t.scale[rows - 1], t.ue8m0[r] = t.ue8m0[rows - 1];
            continue;
        }
        const int64_t srow = (b.q.row0 + row) / b.q.bn;
        if (bytes) {
            t.ue8m0[r] = static_cast<const uint8_t*>(b.q.scale) + srow * b.q.ld;
            if (!ue8m0_normal(t.ue8m0[r], groups)) return false;
            continue;
        }
        t.scale[r] = scales + r * groups;
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
// per chunk of 128 k in f32; the lane's sum is then scaled once by its scale group's scale (fma into the total), as
// the CUDA kernels promote their partial sums. So an output is Σ s_g·Σ code·a instead of Σ_k round(code·s_g)·a: no
// rounding of the weights, a few f32 ulps from the dequantized-weight path (tests: within 1e-5 of float64), the same
// bits for any m <= 24 and thread count. vdpbf16ps flushes bf16 subnormals (|a| < 2^-126) to zero.
//
// The decode is one shuffle per 32 codes. A zmm holds 64 bytes of a row, 128 codes: word i holds codes 4i .. 4i + 3,
// one per nibble. vpermw reads only the low 5 bits of each index word, so a 32-entry table that ignores bit 4 decodes
// the low nibble of every word at once; shifting the words right by 4, 8 and 12 decodes the other three. Phase j's
// word i is code 4i + j, so vdpbf16ps lane l pairs codes 8l + j and 8l + 4 + j: A is laid out the same way once per
// call (rows_as_bf16), and lane l's 8 codes of a chunk lie in one scale group whenever bk (16 for NVFP4, 32 for MXFP4)
// divides 128. The old decode took vpmultishiftqb + vpermw per 32 codes; on the dev Xeon the shuffles, the 512-bit
// shifts and vdpbf16ps (~2.3 cycles each) all wait on one port, so these 11 instructions per 128 codes and row are the
// bound (bench/RESULTS.md AC).
constexpr int64_t kChunk = 128;  // k per 64-byte load of codes

// e2m1 code (the low 4 of the 5 index bits vpermw reads; bit 4 is the next code's) -> its bf16.
inline __m512i bf16_lut() {
    constexpr uint16_t kBf16[8] = {0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040, 0x4080, 0x40c0};
    alignas(64) uint16_t lut[32];
    for (int i = 0; i < 32; ++i) lut[i] = uint16_t(kBf16[i & 7] | ((i & 8) ? 0x8000 : 0));
    return _mm512_load_si512(lut);
}

// Lane l's scale group within its chunk, 8l / bk, in its low byte (vpermps) and its top byte (vpermb: UE8M0 bytes).
inline __m512i group_lanes(int64_t bk) {
    alignas(64) int32_t idx[16];
    for (int l = 0; l < 16; ++l) idx[l] = int32_t(8 * l / bk) * 0x01000001;
    return _mm512_load_si512(idx);
}

// Whether bf16_tile may read a tile's scales as UE8M0 bytes (MXFP4): four groups a chunk, no global scale.
inline bool chunk_reads_ue8m0(const WeightQuant& q, int64_t bk) {
    return bk == 32 && q.global == 1.0f && q.scale_dtype != DType::kF32 && q.scale_dtype != DType::kFP8E4M3;
}

// Whether a chunk's lanes each lie in one scale group of bk.
inline bool chunk_fits_groups(int64_t bk) { return bk % 16 == 0 && kChunk % bk == 0; }

// One chunk of 128 k at k of NR rows of B against MB rows of A, into tot: its scale groups from g0, `live` those that
// exist, as floats (t.scale) or Ue8m0 bytes (t.ue8m0, normal ones: 2^(e - 127) is e << 23). Tail: the last chunk of a
// row whose K is no multiple of 128 (its codes past K read as 0, A's layout is zero there, its scales past the last
// group as 0).
template <bool Tail, bool Ue8m0, int NR, int MB>
__attribute__((target("avx512bf16"), always_inline)) inline void bf16_chunk(const uint16_t* const* a, const Tile& t,
                                                                            int64_t K, int64_t k, int64_t g0,
                                                                            __mmask16 live, __m512i lut, __m512i lanes,
                                                                            __m512 (&tot)[NR][MB]) {
    const __mmask64 bytes = Tail ? ~uint64_t(0) >> (64 - (K - k) / 2) : ~uint64_t(0);
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) _mm_prefetch(reinterpret_cast<const char*>(t.row[r] + t.ahead + k / 2), _MM_HINT_T1);
    __m512 blk[NR][MB];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r)
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb) blk[r][mb] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)
#pragma GCC unroll 8
        for (int r = 0; r < NR; ++r) {
            const __m512i src =
                Tail ? _mm512_maskz_loadu_epi8(bytes, t.row[r] + k / 2) : _mm512_loadu_si512(t.row[r] + k / 2);
            const __m512bh w = (__m512bh)_mm512_permutexvar_epi16(j ? _mm512_srli_epi16(src, 4 * j) : src, lut);
#pragma GCC unroll 6
            for (int mb = 0; mb < MB; ++mb)
                blk[r][mb] = _mm512_dpbf16_ps(blk[r][mb], w, (__m512bh)_mm512_loadu_si512(a[mb] + k + 32 * j));
        }
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
        __m512 s;
        if constexpr (Ue8m0) {
            uint32_t four = 0;  // the chunk's 4 scale bytes
            if constexpr (Tail)
                for (int g = 0; live >> g & 1; ++g) four |= uint32_t(t.ue8m0[r][g0 + g]) << (8 * g);
            else
                std::memcpy(&four, t.ue8m0[r] + g0, 4);
            const __m512i e = _mm512_maskz_permutexvar_epi8(kByte3, lanes, _mm512_set1_epi32(int32_t(four)));
            s = _mm512_castsi512_ps(_mm512_srli_epi32(e, 1));
        } else {
            s = _mm512_permutexvar_ps(lanes, _mm512_maskz_loadu_ps(live, t.scale[r] + g0));
        }
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb) tot[r][mb] = _mm512_fmadd_ps(blk[r][mb], s, tot[r][mb]);
    }
}

// NR rows of B against MB bf16 rows of A in the chunk layout (rows_as_bf16); K a multiple of bk, bk of 128.
template <bool Ue8m0, int NR, int MB>
__attribute__((target("avx512bf16"))) void bf16_tile(const uint16_t* const* a, const Tile& t, int64_t K, int64_t bk,
                                                     float* c, int64_t ldc, int stored) {
    const __m512i lut = bf16_lut(), lanes = group_lanes(bk);
    __m512 tot[NR][MB];
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r)
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb) tot[r][mb] = _mm512_setzero_ps();
    const int64_t span = kChunk / bk;  // scale groups a chunk
    int64_t k = 0, g = 0;
    for (; k + kChunk <= K; k += kChunk, g += span)
        bf16_chunk<false, Ue8m0>(a, t, K, k, g, __mmask16((1u << span) - 1), lut, lanes, tot);
    if (k < K) bf16_chunk<true, Ue8m0>(a, t, K, k, g, __mmask16((1u << (K / bk - g)) - 1), lut, lanes, tot);
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r)
#pragma GCC unroll 6
        for (int mb = 0; mb < MB; ++mb)
            if (r < stored)
                c[mb * ldc + r] =
                    hsum8(_mm256_add_ps(_mm512_castps512_ps256(tot[r][mb]), _mm512_extractf32x8_ps(tot[r][mb], 1)));
}

// A's rows as bf16 in the chunk layout of bf16_tile when every value is one (its low 16 bits zero): row r at dst + r *
// ka (ka = K rounded up to 128, zero past K; K a multiple of 16), chunk word 32j + 2l + h = a[8l + 4h + j]. Phase j's
// words 0-15 (l < 8) come from the chunk's first 64 values and 16-31 from its last 64, by the same index.
bool rows_as_bf16(const float* const* a, int64_t m, int64_t K, int64_t ka, uint16_t* dst) {
    static const auto order = [] {
        std::array<std::array<uint16_t, 32>, 4> idx{};
        for (int j = 0; j < 4; ++j)
            for (int p = 0; p < 32; ++p) idx[size_t(j)][size_t(p)] = uint16_t(8 * (p % 16 / 2) + 4 * (p % 2) + j);
        return idx;
    }();
    for (int64_t r = 0; r < m; ++r) {
        __m512i low = _mm512_setzero_si512();
        for (int64_t k = 0; k < ka; k += kChunk) {
            __m512i w[4];  // the chunk's words 32q .. 32q + 31
            for (int q = 0; q < 4; ++q) {
                __m256i half[2];
                for (int f = 0; f < 2; ++f) {
                    const int64_t at = k + 32 * q + 16 * f;
                    const __m512i v = at < K ? _mm512_loadu_si512(a[r] + at) : _mm512_setzero_si512();
                    low = _mm512_or_si512(low, v);
                    half[f] = _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16));
                }
                w[q] = _mm512_inserti64x4(_mm512_castsi256_si512(half[0]), half[1], 1);
            }
            for (int j = 0; j < 4; ++j) {
                const __m512i idx = _mm512_loadu_si512(order[size_t(j)].data());
                _mm512_storeu_si512(dst + r * ka + k + 32 * j,
                                    _mm512_mask_blend_epi16(0xffff0000u, _mm512_permutex2var_epi16(w[0], idx, w[1]),
                                                            _mm512_permutex2var_epi16(w[2], idx, w[3])));
            }
        }
        if (_mm512_test_epi32_mask(low, _mm512_set1_epi32(0xffff)) != 0) return false;
    }
    return true;
}

// ---- drivers ----

enum class Kind { kFp8, kFp4, kFp4Bf16 };

// Rows [j, j + rows) of B, rows <= S (the tile's rows: 2 * pairs for f32 A, single rows for kFp4Bf16), against MB
// rows of A (f32 rows, or bf16 rows in the chunk layout for kFp4Bf16).
template <Kind W, int S, int MB>
bool rows_tile(const Decode& d, const void* const* a, const WeightMat& b, int64_t j, int rows, float* c, int64_t ldc) {
    constexpr bool kFp8 = W == Kind::kFp8;
    const int64_t bk = b.q.bk < b.K ? b.q.bk : b.K;
    Tile t;
    if constexpr (W == Kind::kFp4Bf16) {
        const auto* a16 = reinterpret_cast<const uint16_t* const*>(a);
        if (chunk_reads_ue8m0(b.q, bk) && fill_tile<false>(b, j, rows, S, nullptr, t, true))
            bf16_tile<true, S, MB>(a16, t, b.K, bk, c + j, ldc, rows);
        else if (fill_tile<false>(b, j, rows, S, thread_scratch(7, S * (b.K / bk)), t))
            bf16_tile<false, S, MB>(a16, t, b.K, bk, c + j, ldc, rows);
        else
            return false;
    } else {
        if (!fill_tile<kFp8>(b, j, rows, S, thread_scratch(7, S * (b.K / bk)), t)) return false;
        pair_tile<kFp8, S / 2, MB>(d, reinterpret_cast<const float* const*>(a), t, b.K, bk, c + j, ldc, rows);
        if (kFp8)
            for (int r = 0; r < rows; ++r)
                if (has_nan(t.row[r], b.K))
                    for (int mb = 0; mb < MB; ++mb) c[mb * ldc + j + r] = bits_f32(0x7fc00000u);
    }
    return true;
}

template <Kind W, int S, int MB>
bool all_rows(const Decode& d, const void* const* a, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    constexpr int kLast = W == Kind::kFp4Bf16 ? 1 : 2;  // the tile of the rows left over
    int64_t j = 0;
    for (; j + S <= n; j += S)
        if (!rows_tile<W, S, MB>(d, a, b, j, S, c, ldc)) return false;
    for (; j < n; j += kLast)
        if (!rows_tile<W, kLast, MB>(d, a, b, j, n - j < kLast ? 1 : kLast, c, ldc)) return false;
    return true;
}

// Rows of B per tile for MB rows of A, within the 32 zmm registers: f32 pairs, NP*MB accumulators + NP sources + NP
// scales + MB rows of A + 6 constants; bf16 single rows, 2*NR*MB accumulators (chunk and total) + 4 (table, lanes,
// codes, scales), A read from memory by vdpbf16ps.
template <Kind W>
bool pass(const Decode& d, const void* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    constexpr bool kBf16 = W == Kind::kFp4Bf16;
    switch (m) {
        case 1: return all_rows<W, 8, 1>(d, a, b, n, c, ldc);
        case 2: return all_rows < W, kBf16 ? 6 : 8, 2 > (d, a, b, n, c, ldc);
        case 3: return all_rows < W, kBf16 ? 4 : 6, 3 > (d, a, b, n, c, ldc);
        case 4: return all_rows < W, kBf16 ? 3 : 6, 4 > (d, a, b, n, c, ldc);
        case 5: return all_rows < W, kBf16 ? 2 : 4, 5 > (d, a, b, n, c, ldc);
        default: return all_rows < W, kBf16 ? 2 : 4, 6 > (d, a, b, n, c, ldc);
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
    if (kind == Kind::kFp4 && has_bf16 && chunk_fits_groups(bk)) {
        const int64_t ka = (b.K + kChunk - 1) / kChunk * kChunk;
        auto* buf = reinterpret_cast<uint16_t*>(thread_scratch(4, m * ka / 2));
        if (rows_as_bf16(a, m, b.K, ka, buf)) {
            for (int64_t r = 0; r < m; ++r) bf16_rows[r] = buf + r * ka;
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
