// AVX2 dequantization of quantized expert weights (the kernel table's `dequant` into f32 rows, and `stream_fused`,
// the decode GEMV that decodes in registers): e4m3 by integer shifts into an f32 with a 2^-120 bias (NaN kept, or
// fixed up per row in the GEMV), e2m1 through a 16-entry byte shuffle. A group's scale (times the bias) is one
// multiply, so each element is code * (scale * global) rounded once, as in dequant.h.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "src/cpu/fp4_int_avx2.h"
#include "src/cpu/kernels.h"
#include "src/cpu/parallel.h"
#include "src/cpu/scalar_codecs_local.h"
#include "src/cpu/simd_avx2.h"

namespace moex::cpu {
namespace {

// 8 e4m3 bytes -> the bits of 8 f32 times 2^-120: a sign-extended byte shifted by 20 puts the 7 value bits where an
// f32's low exponent and top mantissa bits are (subnormals included, as f32 subnormals) and the sign at bit 31.
// Three integer operations; NaN codes (0x7f, 0xff) come out finite.
inline __m256i e4m3x8_biased_bits(const uint8_t* p) {
    const __m256i t = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_and_si256(_mm256_slli_epi32(t, 20), _mm256_set1_epi32(int32_t(0x87f00000u)));
}

// e4m3x8_biased_bits with 0x7f (NaN) given the all-ones exponent. Five integer operations, no F16C.
inline __m256 e4m3x8(const uint8_t* p) {
    const __m256i f = e4m3x8_biased_bits(p);
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
        _mm_prefetch(reinterpret_cast<const char*>(row + k + kQuantAheadBytes), _MM_HINT_T0);
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
        if ((k & 127) == 0) _mm_prefetch(reinterpret_cast<const char*>(row + k / 2 + kQuantAheadBytes), _MM_HINT_T0);
        __m256 lo, hi;
        e2m1x16(row + k / 2, lo, hi);
        _mm256_storeu_ps(d, _mm256_mul_ps(lo, s));
        _mm256_storeu_ps(d + 8, _mm256_mul_ps(hi, s));
    }
    for (; k < k1; ++k) *d++ = e2m1_value((k & 1) ? row[k / 2] >> 4 : row[k / 2] & 15u) * sg;
}

// ---- the fused decode GEMV: C = A·Bᵀ for up to 24 rows of A, B's codes decoded in registers ----
// TUTORIAL: the weight of group g is code · S_g, so Σ_k a·w = Σ_g S_g · Σ_{k in g} a·code. The kernel sums each group's
// products of the raw decoded codes, then folds the group in with one fma by S_g: the per-weight scale multiply of the
// dequantized path is gone. FP8 codes become f32s with a 2^-120 bias by 3 integer operations per 8, against A rows
// scaled by 2^112 (fp8x16_biased), or, where that scaling cannot be exact, f16 bits widened by vcvtph2ps (fp8x16):
// both make the products a * code * 2^-8, so the same bits. FP4 codes go through a byte shuffle and vcvtph2ps. Order of
// each output, whatever the rows per call, tile or thread: lane l = k mod 8 of the group sum is an fma chain from 0 in
// increasing k; the total is an fma chain over g from 0; then hsum8.

// 16 e4m3 codes -> 2 x 8 f32 holding the codes' values times 2^-8: a code in the high byte of a 16-bit lane, shifted
// right by one with its sign, is an f16 of the same sign, exponent field and mantissa (e4m3's exponent bias 7 is
// f16's 15 less 8, subnormals included); the AND clears the sign's copy in bit 14. Code 0x7f (NaN) decodes finite:
// row_has_nan fixes its row afterwards.
inline void fp8x16(const uint8_t* p, __m256& lo, __m256& hi) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), z = _mm_setzero_si128();
    const __m128i m = _mm_set1_epi16(int16_t(0xbf80));
    lo = _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(_mm_unpacklo_epi8(z, b), 1), m));
    hi = _mm256_cvtph_ps(_mm_and_si128(_mm_srai_epi16(_mm_unpackhi_epi8(z, b), 1), m));
}

// 16 e4m3 codes -> 2 x 8 f32 holding the codes' values times 2^-120 (e4m3x8_biased_bits, no NaN fix-up): three
// integer operations per 8 codes and no vcvtph2ps, 1.45x fp8x16's rate on the dev EPYC (0.059-0.067 against 0.085-0.100
// ns per weight, one thread, L2-resident rows). e4m3 subnormals become f32 subnormals, so fused() uses it only against
// A rows scaled by 2^112 (products a * code * 2^-8 as fp8x16 gives them, the same bits) and not under DAZ.
inline void fp8x16_biased(const uint8_t* p, __m256& lo, __m256& hi) {
    lo = _mm256_castsi256_ps(e4m3x8_biased_bits(p));
    hi = _mm256_castsi256_ps(e4m3x8_biased_bits(p + 8));
}

// The f16 high byte of each e2m1 code (every e2m1 value's f16 has a zero low byte; code 8 is -0).
inline __m128i e2m1_f16_high() {
    return _mm_setr_epi8(0x00, 0x38, 0x3c, 0x3e, 0x40, 0x42, 0x44, 0x46, char(0x80), char(0xb8), char(0xbc), char(0xbe),
                         char(0xc0), char(0xc2), char(0xc4), char(0xc6));
}

// 16 bytes = 32 e2m1 codes (low nibble first) -> 4 x 8 f32 in k order: each nibble looks up its f16 high byte, the
// two lookups interleave into k order, and each byte goes above a zero byte into an f16 that vcvtph2ps widens.
inline void fp4x32(const uint8_t* p, __m256 (&v)[4]) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), nib = _mm_set1_epi8(0x0f);
    const __m128i z = _mm_setzero_si128(), lut = e2m1_f16_high();
    const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(b, nib));
    const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(b, 4), nib));
    const __m128i k0 = _mm_unpacklo_epi8(lo, hi), k16 = _mm_unpackhi_epi8(lo, hi);
    v[0] = _mm256_cvtph_ps(_mm_unpacklo_epi8(z, k0)), v[1] = _mm256_cvtph_ps(_mm_unpackhi_epi8(z, k0));
    v[2] = _mm256_cvtph_ps(_mm_unpacklo_epi8(z, k16)), v[3] = _mm256_cvtph_ps(_mm_unpackhi_epi8(z, k16));
}

// 8 bytes = 16 e2m1 codes -> 2 x 8 f32 (groups of 16 and the last 16 codes of a row).
inline void fp4x16(const uint8_t* p, __m256& lo8, __m256& hi8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), nib = _mm_set1_epi8(0x0f);
    const __m128i z = _mm_setzero_si128(), lut = e2m1_f16_high();
    const __m128i k0 = _mm_unpacklo_epi8(_mm_shuffle_epi8(lut, _mm_and_si128(b, nib)),
                                         _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(b, 4), nib)));
    lo8 = _mm256_cvtph_ps(_mm_unpacklo_epi8(z, k0)), hi8 = _mm256_cvtph_ps(_mm_unpackhi_epi8(z, k0));
}

// S_g = scale · global · 2^8 (FP8, undoing fp8x16's 2^-8) or scale · global (FP4) for the groups of one scale row,
// decoded 8 at a time (NVFP4 has one e4m3 scale per 16 weights: a scalar decode each cost as much as the weights).
// False when some S_g is not finite (a NaN scale code, an overflow): the caller then takes the dequantized path.
bool group_scales(const WeightQuant& q, int64_t srow, int64_t groups, float factor, float* out) {
    const __m256 gf = _mm256_set1_ps(q.global), f = _mm256_set1_ps(factor), step = _mm256_set1_ps(0x1.0p60f);
    const auto* s8 = static_cast<const uint8_t*>(q.scale) + srow * q.ld;
    const auto* s32 = static_cast<const float*>(q.scale) + srow * q.ld;
    __m256 bad = _mm256_setzero_ps();
    int64_t g = 0;
    for (; g + 8 <= groups; g += 8) {
        __m256 s;
        if (q.scale_dtype == DType::kF32) {
            s = _mm256_loadu_ps(s32 + g);
        } else if (q.scale_dtype == DType::kFP8E4M3) {
            s = _mm256_mul_ps(_mm256_mul_ps(e4m3x8(s8 + g), step), step);  // exact: e4m3 values are f32 values
        } else {  // ue8m0: the exponent byte; 0 is 2^-127 (an f32 subnormal), 0xff reads as inf and is refused
            const __m256i t = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s8 + g)));
            const __m256i zero = _mm256_cmpeq_epi32(t, _mm256_setzero_si256());
            s = _mm256_castsi256_ps(_mm256_blendv_epi8(_mm256_slli_epi32(t, 23), _mm256_set1_epi32(0x00400000), zero));
        }
        const __m256 v = _mm256_mul_ps(_mm256_mul_ps(s, gf), f);  // scale · global rounded once, as group_scale
        _mm256_storeu_ps(out + g, v);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v),
                                              _mm256_set1_ps(0x1.fffffep127f), _CMP_NLE_UQ));
    }
    bool ok = _mm256_movemask_ps(bad) == 0;
    for (; g < groups; ++g) out[g] = group_scale(q, srow * q.ld + g) * factor, ok &= std::isfinite(out[g]);
    return ok;
}

#define MOEX_INLINE inline __attribute__((always_inline))

// How a tile decodes B: e2m1 codes, e4m3 through f16 bits and vcvtph2ps, or e4m3 with the 2^-120 bias (A scaled).
enum class Codes { kFp4, kFp8F16, kFp8Biased };

// V vectors of 8 decoded codes at k of one row of B against MB rows of A, into that row's group sums.
template <int MB, int V>
MOEX_INLINE void group_fmas(const float* const* a, int64_t k, const __m256 (&v)[V], __m256 (&part)[MB]) {
#pragma GCC unroll 4
    for (int u = 0; u < V; ++u)
#pragma GCC unroll 4
        for (int mb = 0; mb < MB; ++mb) part[mb] = _mm256_fmadd_ps(v[u], _mm256_loadu_ps(a[mb] + k + 8 * u), part[mb]);
}

// NB rows of B (from row j) against MB rows of A; s: the NB rows' S_g, groups apart. K and bk are multiples of 16.
template <Codes D, int NB, int MB>
void fused_tile(const float* const* a, const WeightMat& b, int64_t j, const float* s, int64_t groups, float* c,
                int64_t ldc) {
    constexpr bool Fp8 = D != Codes::kFp4;
    __m256 tot[NB][MB], part[NB][MB];
#pragma GCC unroll 8
    for (int nb = 0; nb < NB; ++nb)
#pragma GCC unroll 4
        for (int mb = 0; mb < MB; ++mb) tot[nb][mb] = _mm256_setzero_ps();
    const int64_t K = b.K, bk = b.q.bk < K ? b.q.bk : K, ld = b.ld;
    const auto* w = static_cast<const uint8_t*>(b.data) + j * ld;
    const int64_t ahead = tile_prefetch_ahead(NB, ld);
    auto prefetch = [&](int64_t byte) __attribute__((always_inline)) {
#pragma GCC unroll 8
        for (int nb = 0; nb < NB; ++nb)
            _mm_prefetch(reinterpret_cast<const char*>(w + ahead + nb * ld + byte), _MM_HINT_T1);
    };
    for (int64_t k0 = 0, g = 0; k0 < K; k0 += bk, ++g) {
        const int64_t k1 = k0 + bk < K ? k0 + bk : K;
#pragma GCC unroll 8
        for (int nb = 0; nb < NB; ++nb)
#pragma GCC unroll 4
            for (int mb = 0; mb < MB; ++mb) part[nb][mb] = _mm256_setzero_ps();
        int64_t k = k0;
        if constexpr (!Fp8)
            for (; k + 32 <= k1; k += 32) {
                if ((k & 127) == 0) prefetch(k / 2);
#pragma GCC unroll 8
                for (int nb = 0; nb < NB; ++nb) {
                    __m256 v[4];
                    fp4x32(w + nb * ld + k / 2, v);
                    group_fmas<MB, 4>(a, k, v, part[nb]);
                }
            }
        for (; k < k1; k += 16) {
            if ((Fp8 ? k & 63 : k & 127) == 0) prefetch(Fp8 ? k : k / 2);
#pragma GCC unroll 8
            for (int nb = 0; nb < NB; ++nb) {
                __m256 v[2];
                if constexpr (D == Codes::kFp8Biased)
                    fp8x16_biased(w + nb * ld + k, v[0], v[1]);
                else if constexpr (Fp8)
                    fp8x16(w + nb * ld + k, v[0], v[1]);
                else
                    fp4x16(w + nb * ld + k / 2, v[0], v[1]);
                group_fmas<MB, 2>(a, k, v, part[nb]);
            }
        }
#pragma GCC unroll 8
        for (int nb = 0; nb < NB; ++nb) {
            const __m256 sg = _mm256_broadcast_ss(s + nb * groups + g);
#pragma GCC unroll 4
            for (int mb = 0; mb < MB; ++mb) tot[nb][mb] = _mm256_fmadd_ps(part[nb][mb], sg, tot[nb][mb]);
        }
    }
#pragma GCC unroll 8
    for (int nb = 0; nb < NB; ++nb)
#pragma GCC unroll 4
        for (int mb = 0; mb < MB; ++mb) c[mb * ldc + j + nb] = hsum8(tot[nb][mb]);
    if (Fp8)
        for (int nb = 0; nb < NB; ++nb)
            if (row_has_nan(w + nb * ld, K))
                for (int mb = 0; mb < MB; ++mb) c[mb * ldc + j + nb] = bits_f32(0x7fc00000u);
}

}  // namespace

// The S_g of rows [j, j + nb) into s (groups apart), decoding each scale row once (FP8 blocks share it across rows).
bool tile_scales_avx2(const WeightMat& b, int64_t j, int64_t nb, int64_t groups, float* s) {
    const float factor = b.q.format == QuantFormat::kFp8 ? 256.0f : 1.0f;
    for (int64_t r = 0; r < nb; ++r) {
        const int64_t srow = (b.q.row0 + j + r) / b.q.bn;
        if (r > 0 && srow == (b.q.row0 + j + r - 1) / b.q.bn)
            std::memcpy(s + r * groups, s + (r - 1) * groups, size_t(groups) * 4);
        else if (!group_scales(b.q, srow, groups, factor, s + r * groups))
            return false;
    }
    return true;
}

namespace {

template <Codes D, int NB, int MB>
bool fused_rows(const float* const* a, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    const int64_t bk = b.q.bk < b.K ? b.q.bk : b.K, groups = (b.K + bk - 1) / bk;
    float* s = thread_scratch(7, NB * groups);
    return for_gemv_tiles<NB>(n, [&]<int R>(int64_t j) {
        if (!tile_scales_avx2(b, j, R, groups, s)) return false;
        fused_tile<D, R, MB>(a, b, j, s, groups, c, ldc);
        return true;
    });
}

template <Codes D>
bool fused_passes(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    return for_gemv_passes(
        m, [&]<int NB, int MB>(int64_t r) { return fused_rows<D, NB, MB>(a + r, b, n, c + r * ldc, ldc); });
}

// A's m rows times 2^112 into per-thread scratch, for fp8x16_biased: exact while every |a| < 2^16 (no overflow; a
// NaN or an infinity also says no). False under DAZ (the biased codes' subnormals would read as zero) or when a
// value is out of range: the caller then decodes through f16.
constexpr int64_t kMaxScaledRows = 24;
bool scaled_rows(const float* const* a, int64_t m, int64_t K, const float** out) {
    if (m > kMaxScaledRows || (_mm_getcsr() & 0x40u) != 0) return false;
    float* buf = thread_scratch(6, m * K);
    const __m256 two112 = _mm256_set1_ps(0x1.0p112f), limit = _mm256_set1_ps(65536.0f);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 in_range = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for (int64_t r = 0; r < m; ++r) {
        float* d = buf + r * K;
        for (int64_t k = 0; k < K; k += 8) {  // K is a multiple of 16 (stream_fused_avx2)
            const __m256 v = _mm256_loadu_ps(a[r] + k);
            in_range = _mm256_and_ps(in_range, _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), limit, _CMP_LT_OQ));
            _mm256_storeu_ps(d + k, _mm256_mul_ps(v, two112));
        }
        out[r] = d;
    }
    return _mm256_movemask_ps(in_range) == 0xff;
}

// FP4: each row of A that int_row_avx2 can write as integer blocks takes the integer route (fp4_int_avx2.cpp), each
// other row the f32 route, alone: a row's bits never depend on the other rows of the call.
bool fused_fp4(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    if (b.K % 32 != 0 || (b.q.bk != 16 && b.q.bk != 32) || m > kMaxScaledRows)
        return fused_passes<Codes::kFp4>(a, m, b, n, c, ldc);
    const int64_t per_row = int_row_floats(b.K);
    float* buf = thread_scratch(6, m * per_row);
    const float* bufs[kMaxScaledRows];
    float* rows[kMaxScaledRows];
    int64_t exact = 0;
    for (int64_t r = 0; r < m; ++r) {
        if (int_row_avx2(a[r], b.K, buf + r * per_row)) {
            bufs[exact] = buf + r * per_row, rows[exact++] = c + r * ldc;
        } else if (!fused_passes<Codes::kFp4>(a + r, 1, b, n, c + r * ldc, ldc)) {
            return false;
        }
    }
    return exact == 0 || stream_fp4_int_avx2(bufs, exact, b, n, rows);
}

template <bool Fp8>
bool fused(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    if constexpr (!Fp8) {
        return fused_fp4(a, m, b, n, c, ldc);
    } else {
        const float* scaled[kMaxScaledRows];
        if (scaled_rows(a, m, b.K, scaled)) return fused_passes<Codes::kFp8Biased>(scaled, m, b, n, c, ldc);
        return fused_passes<Codes::kFp8F16>(a, m, b, n, c, ldc);
    }
}

}  // namespace

bool stream_fused_avx2(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    const int64_t bk = b.q.bk < b.K ? b.q.bk : b.K;
    if (m < 1 || b.transposed || b.K % 16 != 0 || bk % 16 != 0) return false;
    return b.q.format == QuantFormat::kFp8 ? fused<true>(a, m, b, n, c, ldc) : fused<false>(a, m, b, n, c, ldc);
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
