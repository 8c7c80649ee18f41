// The gate epilogue of the up projection: bias, then act(gate)*up, the gpt_oss clamped SwiGLU, or act(up)
// (ungated), rounded to the activation dtype as the reference's bf16/f16 intermediate tensor would be.
#pragma once

#include <cstdint>

#include "src/cpu/problem.h"

namespace moex::cpu {

// Columns of one up task for I-columns [i0, i0 + ni): the weight rows it multiplies and where each lands in its
// (m, up_task_width(ni)) tile. Concatenated: gate rows [i0, +ni) -> tile [0, ni), up rows [I+i0, +ni) -> [ni, 2ni).
// Interleaved: rows [2 i0, +2ni) -> [0, 2ni) as (g, u) pairs. Ungated: rows [i0, +ni) -> [0, ni).
inline int64_t up_task_width(const CpuProblem& cp, int64_t ni) {
    return cp.layout == GateLayout::kUngated ? ni : 2 * ni;
}

// h[r*ldh + i] = round(gate(tile row r, i) + bias), r < m, i < ni, for expert e's columns [i0, i0 + ni).
// The tile is scratch: the bias is added in place.
void apply_gate(const CpuProblem& cp, int64_t e, float* tile, int64_t m, int64_t i0, int64_t ni, float* h, int64_t ldh);

// Portable element-wise gate with libm (expf, erff, tanhf): h[i] = round(f(g[i], u[i])), g unused when ungated.
void gate_row_scalar(const GateOp& op, const float* g, const float* u, int64_t n, float* h);

}  // namespace moex::cpu
