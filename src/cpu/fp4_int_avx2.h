// The AVX2 FP4 decode GEMV's integer route (fp4_int_avx2.cpp) and what it shares with the f32 route
// (dequant_avx2.cpp): the group-scale decode and the prefetch distance. Compiled for AVX2: call only from the AVX2
// kernel table's code.
#pragma once

#include <cstdint>

#include "src/cpu/kernels.h"

namespace moex::cpu {
// The inline helpers have internal linkage: the test (portable code) includes this header too, and the linker must
// never pick an AVX2 file's copy for it (scalar_codecs_local.h says why).
namespace {

// Prefetch distance of the AVX2 quantized kernels, in stored bytes: rows of one matrix are contiguous, so this reaches
// into the rows the next calls read. Without it a thread alternates DRAM waits and compute (decode at T = 1 read 2.4
// GB/s per thread).
constexpr int64_t kQuantAheadBytes = 8192;

// Where a GEMV tile of nb rows, ld bytes apart, prefetches: the same bytes of the rows a whole number of tiles
// (>= kQuantAheadBytes) further on; a fixed distance from each row reaches only this tile and part of the next (see
// stream_fused_avx512.cpp).
inline int64_t tile_prefetch_ahead(int64_t nb, int64_t ld) { return nb * ld * (kQuantAheadBytes / (nb * ld) + 1); }

// The rows [0, n) of B in tiles of NB, then pairs, then a lone row (a lone row is fma-latency bound), as
// tile.template operator()<R>(j) for the R rows from j; false as soon as one tile says false.
template <int NB, class Tile>
bool for_gemv_tiles(int64_t n, Tile&& tile) {
    int64_t j = 0;
    for (; j + NB <= n; j += NB)
        if (!tile.template operator()<NB>(j)) return false;
    for (; j + 2 <= n; j += 2)
        if (!tile.template operator()<2>(j)) return false;
    return j == n || tile.template operator()<1>(j);
}

// Rows of A in passes of up to 4 over all rows of B (each pass decodes B again: its codes come from L2 after the
// first), as pass.template operator()<NB, MB>(r) for the MB rows from r with B in tiles of NB. Every output has the
// same order whatever the pass, so any row count gives the same bits.
template <class Pass>
bool for_gemv_passes(int64_t m, Pass&& pass) {
    for (int64_t r = 0; r < m; r += 4) {
        bool ok;
        switch (m - r) {
            case 1: ok = pass.template operator()<6, 1>(r); break;
            case 2: ok = pass.template operator()<4, 2>(r); break;
            case 3: ok = pass.template operator()<3, 3>(r); break;
            default: ok = pass.template operator()<2, 4>(r); break;
        }
        if (!ok) return false;
    }
    return true;
}

// Floats of scratch int_row_avx2 fills per row of K (K a multiple of 32): the two int16 planes, the block scales, then
// one word per block that is nonzero where the block's low plane is all zero (int_row_avx2).
inline int64_t int_row_floats(int64_t K) { return K + 2 * (K / 32); }

}  // namespace

// One row of A as exact integers per block of 32: a[k] = (hi · 2^15 + lo) · 2^(E_b - 29), the planes in the lane
// order of the kernel's decoded codes, and ab[b] = 2^(E_b - 38) (what turns the kernel's sums back into values); a
// block whose low plane is all zero (every element a multiple of 2^(E_b - 14): bf16 values within 7 binades of the
// block's largest) is marked, and the kernel multiplies its high plane alone (the same sums, one plane's work). False
// when some block cannot be written so (an element more than 22 binades below its block's largest that is no
// multiple of the block's step, a NaN or an infinity, a block whose scale leaves the normal range): that row takes the
// f32 route. `buf` holds int_row_floats(K) floats.
bool int_row_avx2(const float* a, int64_t K, float* buf);

// C rows c[r][j] = Σ_k a_r[k] · w[j][k] for j < n, rows r < m (m <= 24) of A prepared by int_row_avx2 into bufs[r],
// FP4 weights B (MXFP4 or NVFP4, K a multiple of 32). False when a group scale is not finite (the caller then takes
// the dequantized path).
bool stream_fp4_int_avx2(const float* const* bufs, int64_t m, const WeightMat& b, int64_t n, float* const* c);

// The S_g of rows [j, j + nb) of B into s (groups apart), each scale row decoded once (dequant_avx2.cpp). False when
// some S_g is not finite.
bool tile_scales_avx2(const WeightMat& b, int64_t j, int64_t nb, int64_t groups, float* s);

}  // namespace moex::cpu
