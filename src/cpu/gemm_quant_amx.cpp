// Quantized weights on AMX tiles (the amx table's gemm_quant): FP8 e4m3 and FP4 e2m1 rows decoded
// into bf16 panels inside the GEMM, the weight tiles' loop (amx_tiles.h), and DeepGEMM's promotion of each scale
// block's f32 sums into C.
//
// Why it is exact where it can be: every e4m3 code is a bf16 (4 significant bits, exponents 2^-9..2^8), and an e2m1
// code times its block scale (a power of two for MXFP4, an e4m3 for NVFP4) has at most 6 significant bits, so the
// panels hold FP8 codes and FP4 weights without rounding. An FP8 weight's f32 block scale is not a bf16 factor, so it
// stays out of the tiles: each k block of the scales (128 for DeepSeek's 128 x 128) is summed on the tiles from zero,
// stored, and added into C's f32 sum times (weight scale x row scale), as DeepGEMM promotes its FP8 WGMMA sums in
// registers. Activations rounded to e4m3 (act_quant.h) enter the tiles as their codes, their per-(row, group) scales
// joining the weight scale in that product (rows_codes checks code x scale == value for every value).
// Bits: each output is Σ over scale blocks in k order of fma(block sum, w_scale·row_scale, C), the block sum being
// TDPBF16PS's pair order from zero, so a task's rows, columns and k blocking never change them. Against the f32 path
// (dequantized weights, f32 fma chains) the sums differ by their rounding only: within the dtypes' tolerances of the
// float64 reference (tests/test_quant.cpp). As everywhere on AMX, bf16 subnormals read as zero: an FP4 weight below
// 2^-126 (an MXFP4 scale of 2^-126 or 2^-127) contributes nothing.
// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands), not about this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "moex/dtype.h"
#include "src/cpu/amx_tiles.h"
#include "src/cpu/config.h"
#include "src/cpu/dequant.h"
#include "src/cpu/kernels.h"
#include "src/cpu/parallel.h"
#include "src/cpu/quant_rows_avx512.h"

namespace moex::cpu {

namespace {

using namespace amx;

// The promotion of one block of Cᵀ tiles (out: tile 2h + v, weight rows 16h.., A rows 16v..): acc += out x (wf[row] x
// row scale of each A row), or = when first. wrows / arows: the block's weight and A rows (tiles that exist).
void promote(const float* out, float* acc, const float* wf, const float* rs, int wrows, int arows, bool first) {
    for (int h = 0; h < 2 && 16 * h < wrows; ++h)
        for (int v = 0; v < 2 && 16 * v < arows; ++v) {
            const __m512 fa = rs ? _mm512_loadu_ps(rs + 16 * v) : _mm512_set1_ps(1.0f);
            const float* o = out + (2 * h + v) * 256;
            float* a = acc + (2 * h + v) * 256;
            for (int i = 0; i < 16; ++i) {
                const __m512 f = _mm512_mul_ps(fa, _mm512_set1_ps(wf[16 * h + i]));
                const __m512 t = _mm512_load_ps(o + i * 16);
                _mm512_store_ps(a + i * 16,
                                first ? _mm512_mul_ps(t, f) : _mm512_fmadd_ps(t, f, _mm512_load_ps(a + i * 16)));
            }
        }
}

}  // namespace

void gemm_quant_amx(const uint16_t* a, int64_t lda, int64_t m, const RowScales& rs, const WeightMat& b, int64_t n,
                    float* c, int64_t ldc, const uint32_t* packed) {
    const int64_t K = b.K, K32 = (K + 31) / 32 * 32, m16 = (m + 15) / 16 * 16, group = K32 / 2 * 16;
    const int64_t pb = promotion_block(b, rs.s ? rs.group : 0);  // gemm_rows calls only where it is > 0
    const bool whole = pb >= K;                                  // one factor per output, at the end
    const uint32_t* x = weight_tile_rows(a, lda, m16, K32, packed);
    // k blocks of weight_tile_k's size or less, holding whole scale blocks where they are promoted
    const int64_t unit = whole ? 32 : pb, kmax = std::max(unit, weight_tile_k(m16) / unit * unit);
    const int64_t kblocks = (K32 + kmax - 1) / kmax, kc = ((K32 + unit - 1) / unit + kblocks - 1) / kblocks * unit;
    const int64_t ldw = amx_lda(kc), nb32 = (n + 31) / 32, mb32 = (m16 + 31) / 32;
    auto* w = reinterpret_cast<uint16_t*>(thread_scratch(5, 32 * ldw / 2));
    float* acc = kblocks > 1 ? thread_scratch(4, nb32 * mb32 * 1024) : nullptr;
    const int64_t nkb = whole ? 1 : kc / pb;
    float* wf = thread_scratch(7, nkb * 32);  // [scale block][32 weight rows]
    alignas(64) float out[1024], own_acc[1024];
    begin_tiles();
    for (int64_t k0 = 0; k0 < K32; k0 += kc) {
        const int64_t kcc = std::min(kc, K32 - k0);
        const bool last_k = k0 + kcc >= K32;
        for (int64_t nr = 0; nr < n; nr += 32) {
            const int wrows = int(std::min<int64_t>(n - nr, 32));
            decode_rows(b, nr, wrows, n, k0, kcc, w, ldw);
            weight_factors(b, nr, wrows, k0, pb, nkb, wf);
            for (int64_t tr = 0; tr < m16; tr += 32) {
                const int arows = int(std::min<int64_t>(m16 - tr, 32));
                float* blk = acc ? acc + ((nr / 32) * mb32 + tr / 32) * 1024 : own_acc;
                const uint32_t* xs = x + (tr / 16) * group + k0 / 2 * 16;
                if (whole) {  // raw sums across k blocks through blk; the factor once at the end
                    run_weight_block(w, ldw, xs, group, kcc / 32, nullptr, k0 > 0 ? blk : nullptr, last_k ? out : blk,
                                     nullptr, 0, wrows, arows);
                    if (!last_k) continue;
                    promote(out, own_acc, wf, rs.s ? rs.s + tr : nullptr, wrows, arows, true);
                    store_transposed(own_acc, c + tr * ldc + nr, ldc, int(std::min<int64_t>(m - tr, 32)), wrows);
                    continue;
                }
                for (int64_t j = 0; j * pb < kcc; ++j) {  // each scale block from zero, then promoted
                    const int64_t kk = j * pb, steps = std::min(pb, kcc - kk) / 32;
                    run_weight_block(w + kk, ldw, xs + kk / 2 * 16, group, steps, nullptr, nullptr, out, nullptr, 0,
                                     wrows, arows);
                    const float* r = rs.s ? rs.s + ((k0 + kk) / rs.group) * rs.ld + tr : nullptr;
                    promote(out, blk, wf + j * 32, r, wrows, arows, k0 + kk == 0);
                }
                if (last_k) store_transposed(blk, c + tr * ldc + nr, ldc, int(std::min<int64_t>(m - tr, 32)), wrows);
            }
        }
    }
    _tile_release();
}

}  // namespace moex::cpu
