// The CPU kernel table: the few inner loops that the GEMM driver (gemm.cpp) calls, in a portable scalar version
// (kernels_scalar.cpp), an AVX2+FMA+F16C version (*_avx2.cpp), AVX-512 ones (*_avx512.cpp: the f32 tile, the decode
// GEMV, a vdpbf16ps tile) and an AMX-BF16 GEMM (*_amx.cpp), chosen once at run time by cpuid and the OS or set by
// MOEX_CPU_KERNELS=scalar|avx2|avx512|avx512_bf16|amx. Every kernel's float order is fixed by (K, layout) alone.
#pragma once

#include <cstdint>

#include "src/cpu/problem.h"

namespace moex::cpu {

inline constexpr int kNr = 16;  // the packed panel width (columns = weight rows); tables tile nr = 1 or 2 panels

struct KernelTable {
    const char* name;
    // Small-m path that streams B once from memory: C[r*ldc + c] = Σ_k a[r][k]·B(c, k) for r < m, c < n.
    // Rows layout: one 8-lane f32 accumulator per (r, c) over k (lane = k mod 8), then a fixed pairwise lane sum.
    // Transposed layout: each element is the sequential fma chain over k (as the packed path).
    void (*stream)(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc);
    // Packs B(n0 + c, k0 + kk) for c < n, kk < kc as f32 panels [ceil(n/16)][kc][16], zero-padding c >= n.
    void (*pack_b)(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, float* dst);
    // The tile of micro, micro_direct and micro_bf16: up to mr rows of A by nr columns (AVX2 6 x 16: 12 of the 16
    // ymm registers; AVX-512 12 x 32: 24 of the 32 zmm). Columns past 16 come from the next panel (kc * 16 on).
    int mr, nr;
    // C tile of mr rows and nr columns: c = fma chain over k in order, starting from C (acc) or 0.
    void (*micro)(const float* const* a, int mr, int64_t k0, const float* panel, int64_t kc, float* c, int64_t ldc,
                  int nr, bool acc);
    // micro with B read in place from transposed storage, widened on the fly (no packing): B(c, k0 + kk) is
    // b.data[(k0 + kk) * ld + c] for a WeightMat already offset to the tile's first column. Same float order.
    void (*micro_direct)(const float* const* a, int mr, int64_t k0, const WeightMat& b, int64_t kc, float* c,
                         int64_t ldc, int nr, bool acc);
    // Quantized B (rows layout) as f32: dst[r*ldd + kk] = B(r, k0 + kk) for r < n, kk < kc (k0 even for FP4).
    // Each element is code * (scale * global) rounded once, the same bits in every table.
    void (*dequant)(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, float* dst, int64_t ldd);
    // stream for quantized B, the codes decoded in registers (no f32 copy). AVX-512: scaled per weight, the bits of
    // stream on the dequantized rows (except FP4 x bf16-valued rows: vdpbf16ps, scaled per group; see
    // stream_fused_avx512.cpp). AVX2: each scale group of raw codes summed, then scaled once (dequant_avx2.cpp; FP4
    // against rows of exact integer blocks: vpmaddwd, fp4_int_avx2.cpp), the same bits for any row count. Returns false
    // for what it does not cover (the caller dequantizes blocks instead); null in tables without one.
    bool (*stream_fused)(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc);
    // Activation rounding (act_quant.h), null in tables without one (the scalar loop runs): dst[i] = e4m3(divide ?
    // src[i] / q : src[i] * q) * s for i < n, and the largest |src[i]| with NaNs ignored; the scalar codecs' bits.
    void (*round_e4m3)(const float* src, float* dst, int64_t n, float q, bool divide, float s);
    float (*abs_max)(const float* src, int64_t n);
    // Element-wise gate of one row: h[i] = round(f(g[i], u[i])) for i < n (gate.h says which f).
    void (*gate_row)(const GateOp& op, const float* g, const float* u, int64_t n, float* h);
    // dst[i] = f32_to_bf16(src[i]) for i < n (moex/dtype.h's rounding, NaNs and subnormals included: the same bits),
    // null in tables without one (the scalar loop runs).
    void (*to_bf16)(const float* src, int64_t n, uint16_t* dst);
    // out (M, L) = Pᵀ Q for P (m, M) and Q (m, L) row-major f32, each element the f32 tile's fma chain over r = 0..m-1
    // (micro's bits: gemm_rows of Pᵀ's rows against Q as transposed weights), rounded as to_bf16: the backward's weight
    // gradients of an expert with a few rows, without the packed tile's f32 round trip. Null in tables without one.
    void (*outer_bf16)(const float* P, int64_t M, const float* Q, int64_t L, int64_t m, uint16_t* out);
    // bf16 B against A whose every value is a bf16 (vdpbf16ps; on AVX512_BF16 CPUs rows_bf16 is in the avx512,
    // avx512_bf16 and amx tables, pack_b_bf16 in the last two, micro_bf16 in avx512_bf16 only). rows_bf16: A's rows as
    // bf16 (dst[r*ldd + k], ldd even, zero past K up to ldd), false when some value is not a bf16. pack_b_bf16: B as
    // panels [ceil(n/16)][ceil(kc/2)][16] of k pairs (k0 + 2j low, k0 + 2j + 1 high, zeros past n and kc), k0 even.
    // micro_bf16: the tile on them (A row r at a + r*lda), each element summed in pair order, the odd k of each pair
    // first (gemm_avx512.cpp), from C (acc) or 0.
    bool (*rows_bf16)(const float* const* a, int64_t m, int64_t K, uint16_t* dst, int64_t ldd);
    void (*pack_b_bf16)(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, uint32_t* dst);
    void (*micro_bf16)(const uint16_t* a, int64_t lda, int mr, int64_t k0, const uint32_t* panel, int64_t kc, float* c,
                       int64_t ldc, int nr, bool acc);
    // The whole bf16 x bf16 GEMM of a task on AMX-BF16 tiles (null but in the amx table, which has no micro_bf16):
    // C (m, n) = A·Bᵀ over all of b.K, A from rows_bf16 with lda a multiple of 32 and its rows readable up to a
    // multiple of 16 (their outputs are dropped); packed: A's rows already packed for the weight tiles by pack_b_bf16
    // as (m16, K32) bf16 rows, or null. Each element sums TDPBF16PS's k pairs in order, 32 k per instruction from k =
    // 0, through f32 partial sums that are stored and reloaded exactly (gemm_amx.cpp), so its bits depend on (K,
    // layout) only: the same for the packed tiles and the weight tiles, any blocking, any task.
    void (*gemm_bf16)(const uint16_t* a, int64_t lda, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc,
                      const uint32_t* packed);
    // Quantized B (rows layout) on AMX tiles (null but in the amx table): C (m, n) = A·Bᵀ with A's rows as gemm_bf16
    // takes them, each either all bf16 values (rs.s null) or e4m3 codes whose values are code * scale (rs, from
    // rows_codes). B's rows are decoded into bf16 panels inside the GEMM (FP8 codes, FP4 codes times their block
    // scale: exact), and each k block of promotion_block(b, rs.group) is summed on the tiles from zero, then added
    // into C's f32 sum times (weight scale x row scale): DeepGEMM's promotion (gemm_quant_amx.cpp). Each element's bits
    // depend on (K, the scales' blocks) only: the same for any task or row split.
    void (*gemm_quant)(const uint16_t* a, int64_t lda, int64_t m, const RowScales& rs, const WeightMat& b, int64_t n,
                       float* c, int64_t ldc, const uint32_t* packed);
    // FP8 B (rows layout) against m rows of A on vdpbf16ps (null in tables without AVX512_BF16): c[i*ldc + j] =
    // a_i·B(j) for i < m, j < n with A as gemm_quant takes its rows (bf16 values, or codes times rs; row i at a +
    // i*lda) readable up to K, the codes decoded to bf16 in registers, each k block of promotion_block(b, rs.group)
    // summed from zero and added into the f32 total times (weight scale x row scale) (stream_quant_avx512.cpp). Each
    // element's bits depend on (K, the scales' blocks) only. Returns false for what it does not cover (FP4,
    // transposed, K or the block not a multiple of 64, more than 24 rows). The GEMMs give it up to stream_quant_rows
    // rows: 1 where vdpbf16ps is slower than the FMA (from two rows the f32 route is faster there), else 24.
    bool (*stream_quant)(const uint16_t* a, int64_t lda, int64_t m, const RowScales& rs, const WeightMat& b, int64_t n,
                         float* c, int64_t ldc);
    int64_t stream_quant_rows;
    // Rounded activation rows (act_quant.h) taken apart for gemm_quant and stream_quant: dst[r * ldd + k] = a[r][k] /
    // s[r][k / group] as a bf16 (zero past K up to ldd), st[g * ldst + r] = s[r][g]; false when some value is not
    // exactly that code times its scale (the caller then runs the f32 kernels).
    bool (*rows_codes)(const float* const* a, const float* const* s, int64_t m, int64_t K, int64_t group, uint16_t* dst,
                       int64_t ldd, float* st, int64_t ldst);
    // Tables with gemm_bf16: bf16 x bf16 tasks of at least this many rows take it instead of the streaming kernel
    // (gemm.h gemm_path; rows past config.h stream_max_rows always do). MOEX_CPU_AMX_FROM_ROWS sets it for tuning.
    int64_t gemm_bf16_from_rows;
    // Tables with gemm_quant: quantized tasks of at least this many rows take it (MOEX_CPU_AMX_QUANT_FROM_ROWS).
    int64_t gemm_quant_from_rows;
    // Tables with micro_bf16: bf16 x bf16 tasks (rows layout, not batched_mm's lone GEMVs) of at least this many rows
    // take the vdpbf16ps tile (in place or packed) rather than the streaming GEMV; 0: only past stream_max_rows
    // (MOEX_CPU_BF16_TILE_FROM_ROWS sets it for tuning).
    int64_t tile_bf16_from_rows;
    // Tables with micro_bf16: bf16 x bf16 tasks of at most this many rows run the tile the other way round, B's rows
    // read in place as its broadcast operand and A's rows packed (gemm.cpp gemm_bf16_in_place); 0: never
    // (MOEX_CPU_BF16_IN_PLACE_MAX_ROWS sets it for tuning).
    int64_t bf16_in_place_max_rows;
};

// The k block of gemm_quant's and stream_quant's promotion for quantized B against rows scaled per `row_group` k values
// (0: rows not scaled): the weights' scale block along k (FP8; FP4's block scales are exact in the bf16 panels) or
// row_group, whichever is shorter; b.K when one sum over all of K suffices (one scale along k), 0 when the blocks are
// not whole 32-k tiles or do not nest (the f32 kernels then run).
inline int64_t promotion_block(const WeightMat& b, int64_t row_group) {
    const int64_t wk = b.q.format == QuantFormat::kFp8 && b.q.bk < b.K ? b.q.bk : b.K;
    const int64_t rk = row_group > 0 && row_group < b.K ? row_group : b.K;
    const int64_t pb = wk < rk ? wk : rk;
    if (pb == b.K) return b.K;
    return pb % 32 == 0 && (wk == b.K || wk % pb == 0) && (rk == b.K || rk % pb == 0) ? pb : 0;
}

const KernelTable& kernels();              // the best table for this CPU (or MOEX_CPU_KERNELS's)
const KernelTable& scalar_kernels();       // portable (any CPU)
const KernelTable* avx2_kernels();         // null when the CPU lacks AVX2, FMA or F16C
const KernelTable* avx512_kernels();       // null when it also lacks AVX-512 F, BW, VL, DQ or VBMI
const KernelTable* avx512_bf16_kernels();  // null when it also lacks AVX512_BF16
// Whether this CPU's vdpbf16ps issues as fast as its vfmadd231ps, so that the vdpbf16ps tile doubles the f32 tile's
// bf16 products per second: AMD's (Zen 4 on) yes, Intel's no (kernels_scalar.cpp says what was measured). Without
// AMX, kernels() picks avx512_bf16 over avx512 where this holds.
bool vdpbf16ps_at_fma_rate();
// The avx512 table with bf16 x bf16 GEMMs on AMX tiles: null without AMX-TILE + AMX-BF16, or when the OS refuses the
// tile state (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); amx_why_not() says which).
const KernelTable* amx_kernels();
const char* amx_why_not();  // null when amx_kernels() is there, else why not (for messages and test skips)

}  // namespace moex::cpu
