// The three experts pipelines behind run_experts (cuda/launch.h), and the Args of the kernels they share, filled
// from the call in one place (each pipeline passes only what differs).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/quant.cuh"
#include "cuda/experts/act_quant.h"
#include "cuda/experts/combine.h"
#include "cuda/experts/hidden_act.h"
#include "cuda/launch.h"
#include "cuda/routing/routing.h"

namespace moex::cuda {

void run_eager(const ExpertsArgs& a, cudaStream_t stream);    // may synchronise the host (reads counts back)
void run_batched(const ExpertsArgs& a, cudaStream_t stream);  // decode: 1 routing + 2 projection launches
// batched_mm's opt-in one-kernel path for T <= 16 (decode_stream.cuh): MOEX_DECODE_STREAM=1, 16-bit K-major
// weights, T * k <= 128, sm_90.
bool decode_stream_fits(const ExpertsArgs& a);
void run_decode_stream(const ExpertsArgs& a, cudaStream_t stream);
void run_grouped(const ExpertsArgs& a, cudaStream_t stream);  // prefill: routing, gather, 2 grouped GEMMs, combine
// deepgemm: the grouped pipeline on the sm_90a TMA kernels only (FP8 x FP8 for FP8 weights, FP4 codes converted to
// bf16 inside the kernel, or dequantized for the hit experts first where it refuses the shape); what those kernels
// cannot run is an error, never the portable kernel.
void run_deepgemm(const ExpertsArgs& a, cudaStream_t stream);

// What run_grouped may do beyond the plain grouped_mm: sm90_only keeps it on the sm_90a TMA kernels (MOEX_GEMM=portable
// does not apply; a shape they refuse is an error), and the expert scales (E,) multiply each projection's f32
// accumulators before the bias (nvfp4's global scale on weights decoded without it; sm_90a kernels only).
struct GroupedOptions {
    bool sm90_only = false;
    const float* up_expert_scale = nullptr;
    const float* down_expert_scale = nullptr;
};
void run_grouped(const ExpertsArgs& a, cudaStream_t stream, const GroupedOptions& options);
// Why the sm_90a TMA kernels cannot run both projections of this call as they are (nullptr: they can).
const char* grouped_sm90_why_not(const ExpertsArgs& a);

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
                      .slot_row = r.slot_row,
                      .total_rows = r.expert_row_start + a.E,
                      .rows_bound = rows_bound,
                      .H = a.H,
                      .k = a.k,
                      .T = a.T,
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

inline bool quantizes_activations(const ExpertsArgs& a) { return a.act_quant.mode != ActivationQuant::kNone; }
// Activation values per scale along K of the up (K = H) or down (K = I) projection's input: the slice the GEMMs
// promote per (quant.cuh), so one activation scale meets one weight scale.
inline int64_t act_group(const ExpertsArgs& a, bool up) {
    return up ? promotion_group(a.gate_up_scales, a.H) : promotion_group(a.down_scales, a.I);
}
// 16-bit kernels take quantized activations as codes plus per-slice scales (promotion); f32 ones as rounded values.
inline bool activation_codes(const ExpertsArgs& a) { return quantizes_activations(a) && a.dtype != DType::kF32; }
// Scales per row of the up (K = H) or down (K = I) projection's input in codes mode.
inline int64_t act_slices(const ExpertsArgs& a, bool up) { return (up ? a.H : a.I) / act_group(a, up); }

// Activation quantization of the input of the up (K = H) or down (K = I) projection: rows of `src` (row r reads src
// row r / src_div) rounded into `dst`. The caller sets the expert source (ids or tiles) when it has one, and
// scale_out in codes mode.
inline ActQuantArgs act_quant_args(const ExpertsArgs& a, bool up, const void* src, void* dst, int64_t rows,
                                   int64_t src_div) {
    const bool st = a.act_quant.mode == ActivationQuant::kStatic;
    return ActQuantArgs{.src = src,
                        .dst = dst,
                        .rows = rows,
                        .K = up ? a.H : a.I,
                        .src_div = src_div,
                        .group = act_group(a, up),
                        .static_scale = st ? (up ? a.act_quant.up_scale : a.act_quant.down_scale) : nullptr,
                        .scale_out = nullptr,
                        .dst_e4m3 = false,
                        .ids = nullptr,
                        .ids_i64 = a.ids_i64,
                        .tile_expert = nullptr,
                        .num_tiles = nullptr,
                        .tile_rows = 1,
                        .E = a.E,
                        .dtype = a.dtype};
}

// out = the slot-ordered sum over Y (rows, H), f32 or (y_f32 false) the dtype: rows by slot_row (nullptr: row = slot);
// weighted: the down bias and the routing weights are applied here (else Y already holds them).
inline CombineArgs combine_args(const ExpertsArgs& a, const void* Y, const int32_t* slot_row, bool weighted,
                                bool y_f32 = true) {
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
                       .weights_f32 = weighted && a.weights_f32,
                       .y_f32 = y_f32};
}

}  // namespace moex::cuda
