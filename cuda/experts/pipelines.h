// The three experts pipelines behind run_experts (cuda/launch.h), and the Args of the kernels they share, filled
// from the call in one place (each pipeline passes only what differs).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/experts/combine.h"
#include "cuda/experts/hidden_act.h"
#include "cuda/launch.h"
#include "cuda/routing/routing.h"

namespace moex::cuda {

void run_eager(const ExpertsArgs& a, cudaStream_t stream);    // may synchronise the host (reads counts back)
void run_batched(const ExpertsArgs& a, cudaStream_t stream);  // decode: 1 routing + 2 projection launches
void run_grouped(const ExpertsArgs& a, cudaStream_t stream);  // prefill: routing, gather, 2 grouped GEMMs, combine

inline int64_t up_width(const ExpertsArgs& a) { return a.has_gate ? 2 * a.I : a.I; }

// x rows gathered into `rows` (rows_bound, H) in the routing's row order; row_scale (or nullptr) gets each row's
// routing weight.
inline GatherArgs gather_args(const ExpertsArgs& a, const RoutingArgs& r, void* rows, float* row_scale,
                              int64_t rows_bound) {
    return GatherArgs{.x = a.hidden_states,
                      .A = rows,
                      .row_scale = row_scale,
                      .topk_weights = a.top_k_weights,
                      .row_slot = r.row_slot,
                      .total_rows = r.expert_row_start + a.E,
                      .rows_bound = rows_bound,
                      .H = a.H,
                      .k = a.k,
                      .dtype = a.dtype,
                      .weights_f32 = a.weights_f32};
}

// h = gate(U + bias) (or act(U + bias) when !gated) over the routed rows; U (rows_bound, N) f32.
inline HiddenActArgs hidden_act_args(const ExpertsArgs& a, const RoutingArgs& r, const float* U, void* h,
                                     int64_t rows_bound, int64_t N, const void* bias, bool gated) {
    return HiddenActArgs{.U = U,
                         .h = h,
                         .bias = bias,
                         .row_slot = r.row_slot,
                         .ids = a.top_k_index,
                         .total_rows = r.expert_row_start + a.E,
                         .rows_bound = rows_bound,
                         .N = N,
                         .I = a.I,
                         .E = a.E,
                         .dtype = a.dtype,
                         .ids_i64 = a.ids_i64,
                         .has_gate = gated,
                         .gate = a.gate};
}

// out = the slot-ordered sum over Y (rows, H) f32: rows by slot_row (nullptr: row = slot); weighted: the down bias
// and the routing weights are applied here (else Y already holds them).
inline CombineArgs combine_args(const ExpertsArgs& a, const float* Y, const int32_t* slot_row, bool weighted) {
    return CombineArgs{.Y = Y,
                       .slot_row = slot_row,
                       .ids = a.top_k_index,
                       .bias = weighted ? a.down_bias : nullptr,
                       .weights = weighted ? a.top_k_weights : nullptr,
                       .out = a.out,
                       .T = a.T,
                       .H = a.H,
                       .k = a.k,
                       .E = a.E,
                       .dtype = a.dtype,
                       .ids_i64 = a.ids_i64,
                       .weights_f32 = weighted && a.weights_f32};
}

}  // namespace moex::cuda
