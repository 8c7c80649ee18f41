// Quantized weights on the vdpbf16ps tile (the avx512_bf16 table's gemm_quant, where vdpbf16ps runs at the FMA's
// rate): the AMX GEMM's scheme (gemm_quant_amx.cpp) on the 12 x 32 tile of gemm_avx512.cpp. 12 weight rows at a time
// are decoded exactly into bf16 rows (quant_rows_avx512.h) and read in place as the tile's A operand; the task's
// activation rows are packed once as its [k pair][16 rows] panels, one set per scale block; each scale block of a
// 12 x 32 block of Cᵀ is summed on the tile from zero and promoted into an f32 block times (weight scale x row scale),
// then the block is stored transposed into C.
// Bits: each output is Σ over scale blocks in k order of fma(block sum, w_scale·row_scale, C), the block sum being
// vdpbf16ps's pair order from zero: a task's rows, columns and tiles never change them (they differ from the AMX
// tiles' and the f32 path's by rounding only). bf16 subnormals read as zero, as on AMX.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "src/cpu/config.h"
#include "src/cpu/kernels.h"
#include "src/cpu/parallel.h"
#include "src/cpu/quant_rows_avx512.h"

namespace moex::cpu {

void pack_b_bf16_avx512(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, uint32_t* dst);
void micro_bf16_avx512(const uint16_t* a, int64_t lda, int mr, int64_t k0, const uint32_t* panel, int64_t kc, float* c,
                       int64_t ldc, int nr, bool acc);

namespace {

constexpr int kWRows = 12;  // weight rows per tile (the tile's mr)
constexpr int kARows = 32;  // activation rows per tile (its nr: two panels of 16)

// blk (kWRows x 32, row i = weight row) += sum x (wf[i] x rs[a]) for the tile's first wrows rows, or = when first;
// rs null: 1. Lanes past the tile's activation rows hold whatever the tile left there and are never stored.
void promote(const float* sum, float* blk, const float* wf, const float* rs, int arows, int wrows, bool first) {
    const __mmask16 m0 = arows >= 16 ? __mmask16(0xffff) : __mmask16((1u << arows) - 1);
    const __mmask16 m1 = arows >= 32 ? __mmask16(0xffff) : arows <= 16 ? 0 : __mmask16((1u << (arows - 16)) - 1);
    const __m512 r0 = rs ? _mm512_maskz_loadu_ps(m0, rs) : _mm512_set1_ps(1.0f);
    const __m512 r1 = rs ? _mm512_maskz_loadu_ps(m1, rs + 16) : _mm512_set1_ps(1.0f);
    for (int i = 0; i < wrows; ++i) {
        const __m512 w = _mm512_set1_ps(wf[i]);
        const __m512 f0 = _mm512_mul_ps(r0, w), f1 = _mm512_mul_ps(r1, w);
        const __m512 s0 = _mm512_loadu_ps(sum + i * 32), s1 = _mm512_loadu_ps(sum + i * 32 + 16);
        float* b = blk + i * 32;
        _mm512_storeu_ps(b, first ? _mm512_mul_ps(s0, f0) : _mm512_fmadd_ps(s0, f0, _mm512_loadu_ps(b)));
        _mm512_storeu_ps(b + 16, first ? _mm512_mul_ps(s1, f1) : _mm512_fmadd_ps(s1, f1, _mm512_loadu_ps(b + 16)));
    }
}

}  // namespace

void gemm_quant_bf16_avx512(const uint16_t* a, int64_t lda, int64_t m, const RowScales& rs, const WeightMat& b,
                            int64_t n, float* c, int64_t ldc, const uint32_t* /*packed: the AMX tiles' layout*/) {
    const int64_t K = b.K, K32 = (K + 31) / 32 * 32;
    const int64_t pb0 = promotion_block(b, rs.s ? rs.group : 0);  // gemm_rows calls only where it is > 0
    const int64_t pb = pb0 >= K ? K32 : pb0, nkb = (K32 + pb - 1) / pb, kp = pb / 2, panels = (m + 15) / 16;
    // The activations as the tile's panels, per scale block j: [panel][kc_j / 2][16] at ax + j * panels * kp * 16 (only
    // the last block may be shorter than pb).
    auto* ax = reinterpret_cast<uint32_t*>(thread_scratch(0, nkb * panels * kp * 16));
    const WeightMat aw{a, DType::kBF16, false, lda, K32};
    for (int64_t j = 0; j < nkb; ++j)
        pack_b_bf16_avx512(aw, m, j * pb, std::min(pb, K32 - j * pb), ax + j * panels * kp * 16);
    const int64_t ldw = amx_lda(K32);
    auto* w = reinterpret_cast<uint16_t*>(thread_scratch(5, 16 * ldw / 2));
    float* wf = thread_scratch(7, nkb * 32);  // [scale block][32 weight rows]
    alignas(64) float sum[kWRows * 32], blk[kWRows * 32];
    for (int64_t n0 = 0; n0 < n; n0 += kWRows) {
        const int wrows = int(std::min<int64_t>(n - n0, kWRows));
        decode_rows(b, n0, wrows, n, 0, K32, w, ldw);
        weight_factors(b, n0, wrows, 0, pb, nkb, wf);
        for (int64_t a0 = 0; a0 < m; a0 += kARows) {
            const int arows = int(std::min<int64_t>(m - a0, kARows));
            for (int64_t j = 0; j < nkb; ++j) {
                const int64_t k0 = j * pb, kc = std::min(pb, K32 - k0);
                const uint32_t* panel = ax + j * panels * kp * 16 + (a0 / 16) * (kc / 2) * 16;
                micro_bf16_avx512(w, ldw, wrows, k0, panel, kc, sum, 32, arows, false);
                const float* r = rs.s ? rs.s + (k0 / rs.group) * rs.ld + a0 : nullptr;
                promote(sum, blk, wf + j * 32, r, arows, wrows, j == 0);
            }
            for (int a1 = 0; a1 < arows; ++a1)
                for (int i = 0; i < wrows; ++i) c[(a0 + a1) * ldc + n0 + i] = blk[i * 32 + a1];
        }
    }
}

}  // namespace moex::cpu
