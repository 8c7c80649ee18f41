// The decode GEMV of FP8 weights against a few rows of A on vdpbf16ps (the kernel table's stream_quant, on CPUs with
// AVX512_BF16): the rows as bf16 values or as e4m3 codes with per-group scales (gemm.h Bf16Rows), B's e4m3 codes
// decoded to bf16 in registers and summed against them 32 products per instruction, each scale block's f32 sum then
// promoted into the total times (weight scale x row scale), as the AMX GEMM and DeepGEMM do.
//
// Why: the f32 route (stream_fused_avx512.cpp) decodes 16 codes into f32 lanes, then scales and multiplies each
// weight apart. Here 64 codes take two 128-entry byte lookups (vpermi2b: the high and the low byte of each
// magnitude's bf16), one ternary OR of the sign and two byte interleaves, then two vdpbf16ps; the rows are read as 8
// sequential streams far apart (stream_quant_avx512 below). Measured on the dev Xeon (bench/RESULTS.md V): one thread
// decodes 16 GB/s of FP8 from L2 this way against 13 by the f32 route, two processes read 11.7-12.2 GB/s each from
// DRAM (8 adjacent rows per tile: 9.4-10.5; the f32 route 8.7-9.0), and the T = 1 experts call of qwen3-30b-a3b runs
// in 1.78-2.05 ms against 2.43-2.92. Both vpermi2b and vdpbf16ps issue once per 2 cycles there (vfmadd231ps twice per
// cycle), so from two rows of A on the f32 route's fmas cost less (mixtral-8x7b T = 8: 67 against 80 ms): the tables
// give it one row only there. Where vdpbf16ps issues at the FMA's rate (AMD's Zen 4: kernels.h vdpbf16ps_at_fma_rate)
// the avx512_bf16 table gives it the streaming path's rows (config.h stream_max_rows), each decode of 64 codes serving
// up to 4 rows of A (bench/RESULTS.md AQ: FP8 decode at T = 8 was slower than bf16's on the f32 route there).
//
// Exact where it can be: every e4m3 code is a bf16 (subnormals m x 2^-9 included, NaN as a quiet NaN), the products
// of two bf16 are exact in f32; a block's sum rounds in vdpbf16ps's pair order, lane by lane, from zero. Bits: each
// output is Σ over the promotion blocks in k order of fma(block sum, w_scale·row_scale, total), then a fixed lane sum,
// so tiles, rows per call and threads never change them (they differ from the f32 route's and the AMX tiles' by
// rounding only). As on AMX, vdpbf16ps reads bf16 subnormal activations as zero.
// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands), not about this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>

#include "moex/dtype.h"
#include "src/cpu/config.h"
#include "src/cpu/dequant.h"
#include "src/cpu/kernels.h"
#include "src/cpu/parallel.h"

namespace moex::cpu {
namespace {

#define MOEX_BF16 __attribute__((target("avx512bf16")))

constexpr int kTileRows = 8;     // rows of B per tile against one row of A: 8 block sums and 8 totals in zmm
constexpr int kPairRows = 2;     // rows of B per tile against several: 2 x kChunk sums and totals, kChunk A pairs
constexpr int kChunk = 4;        // rows of A a tile runs at once (the tile's B rows reread from L1 for the next 4)
constexpr int kMaxBlocks = 512;  // promotion blocks per row a tile keeps (K / block); more: the f32 route
// Prefetch distance: each stream fetches the same bytes of a row a whole number of rows further on, at least kAhead
// bytes over all the tile's streams, into L2 (2-32 KiB measured within the noise, bench/RESULTS.md V2).
constexpr int64_t kAhead = 8192;

// The bf16 of each e4m3 magnitude (codes 0-127) as two 128-byte tables, its high bytes and its low bytes, each in two
// zmm for vpermi2b (index bit 6 picks the register, bit 7, the code's sign, is ignored).
struct Fp8Tables {
    __m512i hi0, hi1, lo0, lo1;
};

Fp8Tables fp8_tables() {
    alignas(64) uint8_t hi[128], lo[128];
    for (int c = 0; c < 128; ++c) {
        const uint16_t b = f32_to_bf16(fp8e4m3_to_f32(uint8_t(c)));  // exact; 0x7f is NaN
        hi[c] = uint8_t(b >> 8), lo[c] = uint8_t(b);
    }
    return {_mm512_load_si512(hi), _mm512_load_si512(hi + 64), _mm512_load_si512(lo), _mm512_load_si512(lo + 64)};
}

// 64 codes as 64 bf16 in two zmm: w0 holds codes 16L + 0..7 of each 128-bit lane L, w1 codes 16L + 8..15 (the byte
// interleaves work within lanes). A's rows are permuted to match (a_pair).
inline void decode64(const Fp8Tables& t, __m512i v, __m512i& w0, __m512i& w1) {
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.hi0, v, t.hi1), v,
                                                 _mm512_set1_epi8(char(0x80)), 0xf8);  // magnitude | (v & sign)
    const __m512i lo = _mm512_permutex2var_epi8(t.lo0, v, t.lo1);
    w0 = _mm512_unpacklo_epi8(lo, hi), w1 = _mm512_unpackhi_epi8(lo, hi);
}

// 64 bf16 of A from k in decode64's order: a0 the words k + 16L + 0..7 of each lane L (qwords 0, 1, 4, 5 of each
// 32-word half), a1 k + 16L + 8..15.
inline void a_pair(const uint16_t* a, __m512i& a0, __m512i& a1) {
    const __m512i x0 = _mm512_loadu_si512(a), x1 = _mm512_loadu_si512(a + 32);
    a0 = _mm512_permutex2var_epi64(x0, _mm512_setr_epi64(0, 1, 4, 5, 8, 9, 12, 13), x1);
    a1 = _mm512_permutex2var_epi64(x0, _mm512_setr_epi64(2, 3, 6, 7, 10, 11, 14, 15), x1);
}

// The rows of B one tile reads (a tail tile repeats its last row; only `stored` outputs are written) and each row's
// weight scale per promotion block (scale x global).
struct Tile {
    const uint8_t* row[kTileRows];
    const float* ws[kTileRows];
    int64_t ahead;  // bytes from a row to the one it prefetches
    int stored;
};

// NB rows of B against MB rows of A (row i at a + i * lda, permuted by permuted_rows), the output of tile row r and A
// row i at c[r * ldc + i * ldm] (K a multiple of the promotion block pb, pb of 64); A row i's scale of group g (of
// `group` k) is as[g * asld + i], or bf16 values (as null): each output's sum per block in 16 lanes, from zero,
// promoted.
template <int NB, int MB>
MOEX_BF16 void fp8_tile(const Fp8Tables& tref, const uint16_t* a, int64_t lda, const float* as, int64_t asld,
                        int64_t group, const Tile& t, int64_t K, int64_t pb, float* c, int64_t ldc, int64_t ldm) {
    const Fp8Tables tb = tref;  // in registers
    __m512 tot[NB][MB];
#pragma GCC unroll 8
    for (int nb = 0; nb < NB; ++nb)
#pragma GCC unroll 4
        for (int mb = 0; mb < MB; ++mb) tot[nb][mb] = _mm512_setzero_ps();
    for (int64_t k0 = 0, blk = 0; k0 < K; k0 += pb, ++blk) {
        __m512 sum[NB][MB];
#pragma GCC unroll 8
        for (int nb = 0; nb < NB; ++nb)
#pragma GCC unroll 4
            for (int mb = 0; mb < MB; ++mb) sum[nb][mb] = _mm512_setzero_ps();
        for (int64_t k = k0; k < k0 + pb; k += 64) {
            __m512i a0[MB], a1[MB];
#pragma GCC unroll 4
            for (int mb = 0; mb < MB; ++mb) {
                a0[mb] = _mm512_loadu_si512(a + mb * lda + k);
                a1[mb] = _mm512_loadu_si512(a + mb * lda + k + 32);
            }
#pragma GCC unroll 8
            for (int nb = 0; nb < NB; ++nb) {
                _mm_prefetch(reinterpret_cast<const char*>(t.row[nb] + t.ahead + k), _MM_HINT_T1);
                __m512i w0, w1;
                decode64(tb, _mm512_loadu_si512(t.row[nb] + k), w0, w1);
#pragma GCC unroll 4
                for (int mb = 0; mb < MB; ++mb) {
                    sum[nb][mb] = _mm512_dpbf16_ps(sum[nb][mb], (__m512bh)w0, (__m512bh)a0[mb]);
                    sum[nb][mb] = _mm512_dpbf16_ps(sum[nb][mb], (__m512bh)w1, (__m512bh)a1[mb]);
                }
            }
        }
#pragma GCC unroll 4
        for (int mb = 0; mb < MB; ++mb) {
            const float rs = as != nullptr ? as[(k0 / group) * asld + mb] : 1.0f;
#pragma GCC unroll 8
            for (int nb = 0; nb < NB; ++nb)
                tot[nb][mb] = _mm512_fmadd_ps(sum[nb][mb], _mm512_set1_ps(t.ws[nb][blk] * rs), tot[nb][mb]);
        }
    }
#pragma GCC unroll 8
    for (int nb = 0; nb < NB; ++nb)
#pragma GCC unroll 4
        for (int mb = 0; mb < MB; ++mb)
            if (nb < t.stored) c[nb * ldc + mb * ldm] = _mm512_reduce_add_ps(tot[nb][mb]);
}

// One tile of NB rows of B against all m rows of A, kChunk at a time (the B rows hit L1 after the first chunk).
template <int NB>
void fp8_rows(const Fp8Tables& tables, const uint16_t* a, int64_t lda, int64_t m, const RowScales& rs, const Tile& t,
              int64_t K, int64_t pb, float* c, int64_t ldc, int64_t ldm) {
    for (int64_t i = 0; i < m; i += kChunk) {
        const uint16_t* ai = a + i * lda;
        const float* as = rs.s != nullptr ? rs.s + i : nullptr;
        float* ci = c + i * ldm;
        switch (m - i < kChunk ? m - i : kChunk) {
            case 1: fp8_tile<NB, 1>(tables, ai, lda, as, rs.ld, rs.group, t, K, pb, ci, ldc, ldm); break;
            case 2: fp8_tile<NB, 2>(tables, ai, lda, as, rs.ld, rs.group, t, K, pb, ci, ldc, ldm); break;
            case 3: fp8_tile<NB, 3>(tables, ai, lda, as, rs.ld, rs.group, t, K, pb, ci, ldc, ldm); break;
            default: fp8_tile<NB, kChunk>(tables, ai, lda, as, rs.ld, rs.group, t, K, pb, ci, ldc, ldm); break;
        }
    }
}

// A's m rows in decode64's order, once per call rather than once per tile and k step (the tiles read them against
// every row of B): per 64 k, a_pair's a0 then a1. Thread scratch slot 4 (K values a row).
const uint16_t* permuted_rows(const uint16_t* a, int64_t lda, int64_t m, int64_t K) {
    auto* p = reinterpret_cast<uint16_t*>(thread_scratch(4, m * K / 2));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t k = 0; k < K; k += 64) {
            __m512i a0, a1;
            a_pair(a + i * lda + k, a0, a1);
            _mm512_storeu_si512(p + i * K + k, a0);
            _mm512_storeu_si512(p + i * K + k + 32, a1);
        }
    return p;
}

// A stream's weight scales per promotion block (scale x global) for the scale row it last met.
struct StreamScales {
    int64_t srow = -1;
    alignas(64) float ws[kMaxBlocks];
};

// Row `row` of B as tile row r (its scales refreshed when the row enters another scale row).
inline void set_row(const WeightMat& b, int64_t row, int r, int64_t pb, StreamScales& ss, Tile& t) {
    t.row[r] = static_cast<const uint8_t*>(b.data) + row * b.ld;
    const int64_t srow = (b.q.row0 + row) / b.q.bn;
    if (srow != ss.srow) {
        for (int64_t i = 0; i < b.K / pb; ++i) ss.ws[i] = quant_scale(b.q, row, i * pb);
        ss.srow = srow;
    }
    t.ws[r] = ss.ws;
}

}  // namespace

// The n rows of B are NB runs of s = n / NB rows and tile j takes row j of every run, so each run is read in order
// from its start to its end while the others are: NB sequential streams far apart, as the bf16 decode GEMV reads
// (stream_avx2.cpp). The n - NB·s rows left go in one tile (its last row repeated). One row of A: kTileRows streams;
// more: kPairRows.
template <int NB>
void stream_tiles(const uint16_t* a, int64_t lda, int64_t m, const RowScales& rs, const WeightMat& b, int64_t pb,
                  int64_t n, float* c, int64_t ldc) {
    static const Fp8Tables tables = fp8_tables();
    StreamScales ss[NB];
    Tile t;
    const int64_t s = n / NB;
    t.ahead = b.ld * (kAhead / (NB * b.ld) + 1), t.stored = NB;
    for (int64_t j = 0; j < s; ++j) {
        for (int r = 0; r < NB; ++r) set_row(b, r * s + j, r, pb, ss[r], t);
        fp8_rows<NB>(tables, a, lda, m, rs, t, b.K, pb, c + j, s, ldc);
    }
    const int64_t left = n - NB * s;
    if (left == 0) return;
    for (int r = 0; r < NB; ++r) set_row(b, NB * s + (r < left ? r : left - 1), r, pb, ss[r], t);
    t.stored = int(left);
    fp8_rows<NB>(tables, a, lda, m, rs, t, b.K, pb, c + NB * s, 1, ldc);
}

bool stream_quant_avx512(const uint16_t* a, int64_t lda, int64_t m, const RowScales& rs, const WeightMat& b, int64_t n,
                         float* c, int64_t ldc) {
    if (b.q.format != QuantFormat::kFp8 || b.transposed || b.K % 64 != 0 || m < 1 || m > stream_max_rows(false))
        return false;
    const int64_t pb = promotion_block(b, rs.s != nullptr ? rs.group : 0);
    if (pb == 0 || pb % 64 != 0 || b.K / pb > kMaxBlocks) return false;
    const uint16_t* ap = permuted_rows(a, lda, m, b.K);
    if (m == 1)
        stream_tiles<kTileRows>(ap, b.K, 1, rs, b, pb, n, c, ldc);
    else
        stream_tiles<kPairRows>(ap, b.K, m, rs, b, pb, n, c, ldc);
    return true;
}

}  // namespace moex::cpu
