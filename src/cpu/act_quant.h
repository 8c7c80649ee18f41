// Activation quantization of quantized experts (moex/quant.h): the GEMM inputs rounded to e4m3 and back to f32 as an
// FP8 x FP8 GEMM sees them. Dynamic: per row, each group of block_k values (all of K for per-tensor weights) with
// the f32 scale amax / 448, each value as e4m3(x * (448 / amax)) (dynamic_inverse; an all-zero group stays zero).
// Static: x / activation_scale[e], saturated at +-448.
#pragma once

#include <cstdint>

#include "src/cpu/parallel.h"
#include "src/cpu/problem.h"
#include "src/cpu/routing.h"

namespace moex::cpu {

// The group length along K of the dynamic scheme for a projection with K inputs.
int64_t activation_group(const CpuProblem& cp, int64_t K);

// Dynamic scheme, up projection: x (rows, H) f32 rounded per token into buf (the same for every expert it meets).
const float* quantize_tokens(const CpuProblem& cp, const float* x, int64_t rows, FloatBuffer& buf, int threads);
// Static scheme, up projection: the routed rows of x, each rounded with its expert's scale, as (r.rows(), H) in buf.
const float* quantize_routed_rows(const CpuProblem& cp, const Routing& r, const float* x, FloatBuffer& buf,
                                  int threads);
// Down projection: h (rows, I) rounded in place for the rows of groups [g0, g1) (dynamic or static).
void quantize_hidden(const CpuProblem& cp, const Routing& r, int64_t g0, int64_t g1, float* h, int threads);

}  // namespace moex::cpu
