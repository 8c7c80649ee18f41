// Activation quantization of quantized experts (moex/quant.h): the GEMM inputs rounded to e4m3 and back to f32 as an
// FP8 x FP8 GEMM sees them. Dynamic: per row, each group of block_k values (all of K for per-tensor weights) with
// the f32 scale amax / 448, each value as e4m3(x * (448 / amax)) (dynamic_inverse; an all-zero group stays zero).
// Static: x / activation_scale[e], saturated at +-448. Each pass also keeps the f32 scale of every (row, group), so
// that a kernel can take the rounded rows apart again into e4m3 codes and scales (the AMX GEMM: gemm.h Bf16Rows).
#pragma once

#include <cstdint>

#include "src/cpu/parallel.h"
#include "src/cpu/problem.h"
#include "src/cpu/routing.h"

namespace moex::cpu {

// The scales of rounded rows: row r's group g (values [g * group, (g + 1) * group) of K) has scale s[r * groups + g],
// every value of it a code * s exactly. s null: the rows were not rounded (their values are what they are).
struct ActScales {
    const float* s = nullptr;
    int64_t group = 0, groups = 0;
    const float* row(int64_t r) const { return s ? s + r * groups : nullptr; }
};

// Rounded rows: the values, and their scales.
struct ActRows {
    const float* x;
    ActScales scales;
};

// The group length along K of the dynamic scheme for a projection with K inputs.
int64_t activation_group(const CpuProblem& cp, int64_t K);

// Dynamic scheme, up projection: x (rows, H) f32 rounded per token into buf (the same for every expert it meets).
ActRows quantize_tokens(const CpuProblem& cp, const float* x, int64_t rows, FloatBuffer& buf, FloatBuffer& scales,
                        int threads);
// Static scheme, up projection: the routed rows of x, each rounded with its expert's scale, as (r.rows(), H) in buf.
ActRows quantize_routed_rows(const CpuProblem& cp, const Routing& r, const float* x, FloatBuffer& buf,
                             FloatBuffer& scales, int threads);
// Down projection: h (r.rows(), I) rounded in place for the rows of groups [g0, g1) (dynamic or static); the scales of
// all of h's rows live in `scales` (those of rows outside [g0, g1) as earlier calls left them).
ActScales quantize_hidden(const CpuProblem& cp, const Routing& r, int64_t g0, int64_t g1, float* h, FloatBuffer& scales,
                          int threads);

}  // namespace moex::cpu
