// The two projections of routed rows as independent tasks over (group, row block, column block): up + gate writes
// h (rows, I), down + bias writes y (rows, H). Every element's float order depends on the shape only.
#pragma once

#include <cstdint>

#include "src/cpu/act_quant.h"
#include "src/cpu/problem.h"
#include "src/cpu/routing.h"

namespace moex::cpu {

// The up projection's input: x (chunk_T, H) f32 read by token, or (by_row) one row per routed row (static scales);
// scales: those of quantized activations, indexed like x.
struct UpInput {
    const float* x;
    bool by_row;
    ActScales scales;
};

// h[row] = round(gate(x[token[row]] · up_eᵀ + b_up)) for the rows of groups [g0, g1).
void run_up(const CpuProblem& cp, const Routing& r, int64_t g0, int64_t g1, const UpInput& in, float* h, int threads);
// y[row] = h[row] · down_eᵀ + b_down for the rows of groups [g0, g1); hs: the scales of quantized h rows.
void run_down(const CpuProblem& cp, const Routing& r, int64_t g0, int64_t g1, const float* h, const ActScales& hs,
              float* y, int threads);

}  // namespace moex::cpu
