// Quantized weight rows decoded into bf16 rows for the bf16 tiles (AVX-512; quant_rows_avx512.cpp): the AMX GEMM's
// weight tiles (gemm_quant_amx.cpp) and the vdpbf16ps tile's quantized GEMM (gemm_quant_avx512.cpp) read them.
#pragma once

#include <cstdint>

#include "src/cpu/problem.h"

namespace moex::cpu {

// Rows [n0, n0 + rows) of quantized B (n rows in all) over k in [k0, k0 + kc) (k0 a multiple of 32) as bf16 rows ldd
// apart: FP8 codes, FP4 codes times their block scale (both exact in bf16); zero past K, and the rows past `rows` up
// to a multiple of 16 zero.
void decode_rows(const WeightMat& b, int64_t n0, int rows, int64_t n, int64_t k0, int64_t kc, uint16_t* dst,
                 int64_t ldd);
// The f32 factors of weight rows [n0, n0 + rows)' sums over the scale blocks at k0 + j * pb, j < nkb, as wf[j * 32 + i]
// (zero for i >= rows, rows <= 32): the FP8 block scales, FP4's global (NVFP4) or 1.
void weight_factors(const WeightMat& b, int64_t n0, int rows, int64_t k0, int64_t pb, int64_t nkb, float* wf);

}  // namespace moex::cpu
