// The AVX2 FP4 decode GEMV's integer route: e2m1 codes times activation blocks held as exact integers, on vpmaddwd.
// TUTORIAL: every e2m1 value is half an integer of 0, ±1, ±2, ±3, ±4, ±6, ±8, ±12, and a block of 32 activations is an
// integer vector times a power of two, q · 2^(E - 29) with |q| < 2^30, whenever each element is a multiple of the
// block's step: always for a bf16 row whose elements lie within 22 binades of the block's largest (bf16 carries 8
// significant bits), and for exact zeros. q goes in two int16 planes (q = hi · 2^15 + lo); a block whose elements all
// lie within 7 binades of its largest has lo = 0, and the kernel skips that plane. The codes' integers come
// from a 16-entry byte table and sit in the high byte of 16-bit lanes (x 256); vpmaddwd multiplies them by a plane and
// adds pairs into int32 lanes, exactly (each lane sums 4 products, < 2^29). Both planes' sums convert to f32 exactly
// and combine in one rounding; then the block folds in with one multiply by its activation scale and one fma by the
// weight group's scale (for a lone row of A, one fma by the product of the two, formed per tile: fold_block_scales).
// Per 32 codes that is 3 decode operations and 2 to place the codes, against the f32 route's shuffles and four
// vcvtph2ps (dequant_avx2.cpp): on the dev EPYC (Zen 3) 0.045-0.053 ns a code against 0.099-0.11, one thread,
// L1-resident rows. Sums are exact within a block and rounded once per block: within 1e-5 of float64 like
// the f32 route, not its bits. A row that cannot be written so takes the f32 route alone (dequant_avx2.cpp), so each
// row's bits depend on that row only, whatever the other rows of the call.
// Lanes: the 16 bytes of a block (32 codes, low nibble first) are broadcast to both halves of a ymm, the high half
// shifted by a nibble, masked and looked up: half h holds nibble h of bytes 0-15, codes k = 2p + h. As 16-bit lanes,
// lane j of half h (bytes 2j, 2j + 1) gives the "even" vector code k = 4j + h (byte 2j moved to the high byte) and
// the "odd" vector code k = 4j + 2 + h (byte 2j + 1 masked in place); int_row_avx2 lays the planes out in that order.
// So int32 lane i of each half sums k in {8i + h, 8i + 2 + h, 8i + 4 + h, 8i + 6 + h}: lanes 0-1 of a half are codes
// 0-15 of the block, lanes 2-3 codes 16-31, which is how NVFP4's two groups of 16 per block get their own scales.
#include "src/cpu/fp4_int_avx2.h"

#include <immintrin.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "src/cpu/parallel.h"
#include "src/cpu/simd_avx2.h"

namespace moex::cpu {
namespace {

constexpr int64_t kBlock = 32;

inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

// Twice the e2m1 value of each code, as int8, in both 128-bit halves (vpshufb looks up within a half).
inline __m256i e2m1_twice() {
    return _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2,
                            -3, -4, -6, -8, -12);
}

// NVFP4's two group scales of a block, s[0] for lanes 0-1 and s[1] for lanes 2-3 of each half (see the lane order).
inline __m256 group_pair(const float* s) {
    double pair;
    std::memcpy(&pair, s, sizeof(pair));
    return _mm256_permute_ps(_mm256_castpd_ps(_mm256_set1_pd(pair)), 0x50);
}

// NB rows of B from row j against MB prepared rows of A. s: the rows' group scales, groups apart; kFolded (one row
// of A): each already times the row's block scale ab (fold_block_scales), which saves a multiply and a load per block.
template <int NB, int MB, bool kNv, bool kFolded>
void int_tile(const float* const* bufs, const WeightMat& b, int64_t j, const float* s, int64_t groups,
              float* const* c) {
    static_assert(!kFolded || MB == 1, "the folded scales belong to one row of A");
    __m256 tot[NB][MB];
#pragma GCC unroll 8
    for (int nb = 0; nb < NB; ++nb)
#pragma GCC unroll 4
        for (int mb = 0; mb < MB; ++mb) tot[nb][mb] = _mm256_setzero_ps();
    const int64_t K = b.K, ld = b.ld, blocks = K / kBlock;
    const auto* w = static_cast<const uint8_t*>(b.data) + j * ld;
    const int64_t ahead = tile_prefetch_ahead(NB, ld);
    const __m256i shift = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4), nib = _mm256_set1_epi8(0x0f);
    const __m256i lut = e2m1_twice(), high = _mm256_set1_epi16(int16_t(0xff00));
    const __m256 two15 = _mm256_set1_ps(32768.0f);
    const int32_t* high_only[MB];  // int_row_avx2's block marks of each row of A
#pragma GCC unroll 4
    for (int mb = 0; mb < MB; ++mb) high_only[mb] = reinterpret_cast<const int32_t*>(bufs[mb] + K + blocks);
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t byte = blk * kBlock / 2;
        if ((byte & 63) == 0)
#pragma GCC unroll 8
            for (int nb = 0; nb < NB; ++nb)
                _mm_prefetch(reinterpret_cast<const char*>(w + ahead + nb * ld + byte), _MM_HINT_T1);
        // kHighOnly: every row of A has no low plane in this block, so hi · 2^15 alone is the sum (the same number
        // as hi · 2^15 + 0 in one rounding) and the low plane's products are skipped. One branch a block, outside the
        // rows' loops (a test per row inside the unrolled loops measured slower at T = 1: bench/RESULTS.md AL7).
        auto rows = [&](auto high_only_const) {
            constexpr bool kHighOnly = decltype(high_only_const)::value;
#pragma GCC unroll 8
            for (int nb = 0; nb < NB; ++nb) {
                const __m256i raw =
                    _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + nb * ld + byte)));
                const __m256i x = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srlv_epi32(raw, shift), nib));
                const __m256i even = _mm256_slli_epi16(x, 8), odd = _mm256_and_si256(x, high);
                const float* sg = s + nb * groups;
                const __m256 scale = kNv ? group_pair(sg + 2 * blk) : _mm256_broadcast_ss(sg + blk);
#pragma GCC unroll 4
                for (int mb = 0; mb < MB; ++mb) {
                    const auto* q = reinterpret_cast<const __m256i*>(bufs[mb]) + 4 * blk;
                    const __m256i hi = _mm256_add_epi32(_mm256_madd_epi16(even, _mm256_loadu_si256(q)),
                                                        _mm256_madd_epi16(odd, _mm256_loadu_si256(q + 1)));
                    __m256 v;
                    if constexpr (kHighOnly) {
                        v = _mm256_mul_ps(_mm256_cvtepi32_ps(hi), two15);
                    } else {
                        const __m256i lo = _mm256_add_epi32(_mm256_madd_epi16(even, _mm256_loadu_si256(q + 2)),
                                                            _mm256_madd_epi16(odd, _mm256_loadu_si256(q + 3)));
                        v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), two15, _mm256_cvtepi32_ps(lo));
                    }
                    if constexpr (kFolded) {
                        tot[nb][mb] = _mm256_fmadd_ps(v, scale, tot[nb][mb]);
                    } else {
                        const __m256 ab = _mm256_broadcast_ss(bufs[mb] + K + blk);
                        tot[nb][mb] = _mm256_fmadd_ps(_mm256_mul_ps(v, ab), scale, tot[nb][mb]);
                    }
                }
            }
        };
        bool high_only_all = true;
#pragma GCC unroll 4
        for (int mb = 0; mb < MB; ++mb) high_only_all &= high_only[mb][blk] != 0;
        if (high_only_all)
            rows(std::true_type{});
        else
            rows(std::false_type{});
    }
#pragma GCC unroll 8
    for (int nb = 0; nb < NB; ++nb)
#pragma GCC unroll 4
        for (int mb = 0; mb < MB; ++mb) c[mb][j + nb] = hsum8(tot[nb][mb]);
}

// One row of A: its block scales ab (powers of two) times the tile's group scales s, into out (s's shape). The products
// are exact while they stay normal, and then v · (ab · s) is the same number as (v · ab) · s, so the folded tile gives
// the unfolded one's bits. False (the caller runs the unfolded tile on s) when some product leaves the normal range.
bool fold_block_scales(const float* ab, const float* s, int64_t rows, int64_t groups, int64_t per_block, float* out) {
    // s · ab of nonzero factors below FLT_MIN (rounded, or flushed to zero) or above FLT_MAX is not exact. (A zero
    // block has ab = 0 and sums of 0: 0 either way.)
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), zero = _mm256_setzero_ps();
    const __m256 tiny = _mm256_set1_ps(FLT_MIN), huge = _mm256_set1_ps(FLT_MAX);
    const __m256i pairs = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    __m256 bad = zero;
    bool ok = true;
    for (int64_t r = 0; r < rows; ++r) {
        const float* sr = s + r * groups;
        float* o = out + r * groups;
        int64_t g = 0;
        for (; g + 8 <= groups; g += 8) {
            const __m256 f = per_block == 1
                                 ? _mm256_loadu_ps(ab + g)
                                 : _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(ab + g / 2)), pairs);
            const __m256 x = _mm256_loadu_ps(sr + g), y = _mm256_mul_ps(x, f), ay = _mm256_and_ps(y, abs_mask);
            const __m256 nonzero =
                _mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_NEQ_UQ), _mm256_cmp_ps(f, zero, _CMP_NEQ_UQ));
            bad = _mm256_or_ps(bad, _mm256_and_ps(nonzero, _mm256_cmp_ps(ay, tiny, _CMP_LT_OQ)));
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(ay, huge, _CMP_NLE_UQ));
            _mm256_storeu_ps(o + g, y);
        }
        for (; g < groups; ++g) {
            const float x = sr[g], f = ab[g / per_block], y = x * f;
            ok &= !(x != 0 && f != 0 && std::fabs(y) < FLT_MIN) && std::fabs(y) <= FLT_MAX;
            o[g] = y;
        }
    }
    return ok && _mm256_movemask_ps(bad) == 0;
}

template <int NB, int MB, bool kNv>
bool int_rows_of(const float* const* bufs, const WeightMat& b, int64_t n, float* const* c) {
    const int64_t groups = b.K / b.q.bk, per_block = kBlock / b.q.bk;
    // The tile's group scales, then (one row of A) the same times the row's block scales: the unfolded tile where a
    // product is not exact.
    float* s = thread_scratch(7, (MB == 1 ? 2 : 1) * NB * groups);
    float* folded = s + NB * groups;
    return for_gemv_tiles<NB>(n, [&]<int R>(int64_t at) {
        if (!tile_scales_avx2(b, at, R, groups, s)) return false;
        if constexpr (MB == 1) {
            if (fold_block_scales(bufs[0] + b.K, s, R, groups, per_block, folded)) {
                int_tile<R, MB, kNv, true>(bufs, b, at, folded, groups, c);
                return true;
            }
        }
        int_tile<R, MB, kNv, false>(bufs, b, at, s, groups, c);
        return true;
    });
}

template <int NB, int MB>
bool int_rows(const float* const* bufs, const WeightMat& b, int64_t n, float* const* c) {
    return b.q.bk == 16 ? int_rows_of<NB, MB, true>(bufs, b, n, c) : int_rows_of<NB, MB, false>(bufs, b, n, c);
}

}  // namespace

bool int_row_avx2(const float* a, int64_t K, float* buf) {
    auto* planes = reinterpret_cast<int16_t*>(buf);
    float* ab = buf + K;
    auto* high_only = reinterpret_cast<int32_t*>(ab + K / kBlock);  // nonzero: the block's low plane is all zero
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t k0 = 0, blk = 0; k0 < K; k0 += kBlock, ++blk) {
        __m256 x[4], top = _mm256_setzero_ps();
        for (int i = 0; i < 4; ++i) {
            x[i] = _mm256_loadu_ps(a + k0 + 8 * i);
            top = _mm256_max_ps(top, _mm256_and_ps(x[i], abs_mask));
        }
        int16_t* p = planes + blk * 2 * kBlock;
        const float m = hmax8(top);
        bool finite = true;
        for (int i = 0; i < 4; ++i)
            finite &= _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(x[i], abs_mask), _mm256_set1_ps(FLT_MAX),
                                                       _CMP_NLE_UQ)) == 0;  // no NaN, no infinity
        if (!finite) return false;
        if (m == 0.0f) {
            std::memset(p, 0, 2 * kBlock * sizeof(int16_t));
            ab[blk] = 0.0f;
            high_only[blk] = 1;
            continue;
        }
        const int E = std::ilogb(m);  // m in [2^E, 2^(E+1))
        if (E < -88) return false;    // 2^(E-38) would leave the normal range
        const __m256 to_int = _mm256_set1_ps(std::ldexp(1.0f, 29 - E));
        __m256i q[4];  // q[i]: codes k = 8i + {0, 4, 1, 5, 2, 6, 3, 7}, as (k, k + 4) pairs of residue r = k mod 4
        for (int i = 0; i < 4; ++i) {
            const __m256 y = _mm256_mul_ps(x[i], to_int);  // |y| < 2^30, a power-of-two scaling: exact
            if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), y,
                                                 _CMP_NEQ_UQ)) != 0)
                return false;  // some element is no multiple of the block's step
            q[i] = _mm256_permutevar8x32_epi32(_mm256_cvtps_epi32(y), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        }
        // A 4 x 4 transpose of those pairs: residue r of all 32 codes, k = r, r + 4, ..., r + 28. The lane order above
        // wants k = 4j + h (even vector) and 4j + 2 + h (odd vector) for half h: residues 0 then 1, and 2 then 3.
        const __m256i t0 = _mm256_unpacklo_epi64(q[0], q[1]), t1 = _mm256_unpackhi_epi64(q[0], q[1]);
        const __m256i t2 = _mm256_unpacklo_epi64(q[2], q[3]), t3 = _mm256_unpackhi_epi64(q[2], q[3]);
        const __m256i r0 = _mm256_permute2x128_si256(t0, t2, 0x20), r2 = _mm256_permute2x128_si256(t0, t2, 0x31);
        const __m256i r1 = _mm256_permute2x128_si256(t1, t3, 0x20), r3 = _mm256_permute2x128_si256(t1, t3, 0x31);
        const __m256i low15 = _mm256_set1_epi32(0x7fff);
        auto pack = [](__m256i a, __m256i b) {  // int32 (each fits int16) -> a's 8 then b's 8 as int16
            return _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);
        };
        auto* out = reinterpret_cast<__m256i*>(p);  // hi even, hi odd, lo even, lo odd
        const __m256i lo_even = pack(_mm256_and_si256(r0, low15), _mm256_and_si256(r1, low15));
        const __m256i lo_odd = pack(_mm256_and_si256(r2, low15), _mm256_and_si256(r3, low15));
        _mm256_storeu_si256(out, pack(_mm256_srai_epi32(r0, 15), _mm256_srai_epi32(r1, 15)));
        _mm256_storeu_si256(out + 1, pack(_mm256_srai_epi32(r2, 15), _mm256_srai_epi32(r3, 15)));
        _mm256_storeu_si256(out + 2, lo_even);
        _mm256_storeu_si256(out + 3, lo_odd);
        ab[blk] = std::ldexp(1.0f, E - 38);  // sums count (2 · code value) · 256 · q: value = sum · 2^(E - 29 - 9)
        const __m256i lo = _mm256_or_si256(lo_even, lo_odd);
        high_only[blk] = _mm256_testz_si256(lo, lo);
    }
    return true;
}

bool stream_fp4_int_avx2(const float* const* bufs, int64_t m, const WeightMat& b, int64_t n, float* const* c) {
    return for_gemv_passes(m, [&]<int NB, int MB>(int64_t r) { return int_rows<NB, MB>(bufs + r, b, n, c + r); });
}

}  // namespace moex::cpu
