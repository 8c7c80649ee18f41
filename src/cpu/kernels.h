// The CPU kernel table: the few inner loops that the GEMM driver (gemm.cpp) calls, in a portable scalar version
// (kernels_scalar.cpp), an AVX2+FMA+F16C version (*_avx2.cpp) and an AVX-512 one (the AVX2 table with an AVX-512
// stream_fused, *_avx512.cpp), chosen once at run time by cpuid or forced by MOEX_CPU_KERNELS=scalar|avx2|avx512.
// Every kernel computes each output element with a float operation order fixed by (K, layout) alone.
#pragma once

#include <cstdint>

#include "src/cpu/problem.h"

namespace moex::cpu {

inline constexpr int kMr = 6;   // micro-tile rows (tokens): 6x16 f32 = 12 of the 16 ymm registers
inline constexpr int kNr = 16;  // micro-tile columns (weight rows), also the packed panel width

struct KernelTable {
    const char* name;
    // Small-m path that streams B once from memory: C[r*ldc + c] = Σ_k a[r][k]·B(c, k) for r < m, c < n.
    // Rows layout: one 8-lane f32 accumulator per (r, c) over k (lane = k mod 8), then a fixed pairwise lane sum.
    // Transposed layout: each element is the sequential fma chain over k (as the packed path).
    void (*stream)(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc);
    // Packs B(n0 + c, k0 + kk) for c < n, kk < kc as f32 panels [ceil(n/16)][kc][16], zero-padding c >= n.
    void (*pack_b)(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, float* dst);
    // C tile of mr <= 6 rows and nr <= 16 columns: c = fma chain over k in order, starting from C (acc) or 0.
    void (*micro)(const float* const* a, int mr, int64_t k0, const float* panel, int64_t kc, float* c, int64_t ldc,
                  int nr, bool acc);
    // micro with B read in place from transposed storage, widened on the fly (no packing): B(c, k0 + kk) is
    // b.data[(k0 + kk) * ld + c] for a WeightMat already offset to the tile's first column. Same float order.
    void (*micro_direct)(const float* const* a, int mr, int64_t k0, const WeightMat& b, int64_t kc, float* c,
                         int64_t ldc, int nr, bool acc);
    // Quantized B (rows layout) as f32: dst[r*ldd + kk] = B(r, k0 + kk) for r < n, kk < kc (k0 even for FP4).
    // Each element is code * (scale * global) rounded once, the same bits in every table.
    void (*dequant)(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, float* dst, int64_t ldd);
    // stream for quantized B, the codes decoded and scaled in registers (no f32 copy): the bits of stream on the
    // dequantized rows (except the AVX-512 table's FP4 x bf16-valued rows: vdpbf16ps, scaled per group; see
    // stream_fused_avx512.cpp). Returns false for what it does not cover (the caller dequantizes blocks instead); null
    // in tables without one.
    bool (*stream_fused)(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc);
    // Element-wise gate of one row: h[i] = round(f(g[i], u[i])) for i < n (gate.h says which f).
    void (*gate_row)(const GateOp& op, const float* g, const float* u, int64_t n, float* h);
};

const KernelTable& kernels();         // the best table for this CPU
const KernelTable& scalar_kernels();  // portable (any CPU)
const KernelTable* avx2_kernels();    // null when the CPU lacks AVX2, FMA or F16C
const KernelTable* avx512_kernels();  // null when it also lacks AVX-512 F, BW, VL, DQ or VBMI

}  // namespace moex::cpu
