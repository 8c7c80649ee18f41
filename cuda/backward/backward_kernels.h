// The backward's kernels as the pipeline (backward.cu) sees them: one plain Args struct and one launcher each.
// Rows are the routed rows sorted by expert (cuda/routing with align 1: no padding, row r of expert e in
// [expert_row_start[e], expert_row_start[e] + expert_count[e]), slots in increasing order inside an expert).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/backward/backward.h"
#include "cuda/common/params.h"
#include "moex/dtype.h"

namespace moex::cuda::backward {

inline constexpr int kTile = 64;  // rows and columns of a GEMM tile (and of a routing tile)

// Routed row r of an operand: data + src(r) * ld elements (src(r) = row_slot[r] / k when gathered from a (T, ld)
// tensor of `dtype`, else r in an (S, ld) float32 buffer), times row_scale[r] when given (one f32 product).
struct RowOperand {
    const void* data;
    const int32_t* row_slot;  // (S,) gathered, or nullptr: an (S, ld) f32 buffer
    const float* row_scale;   // (S,) or nullptr
    int64_t ld, k;
};

// C (S, N) f32 = A (S, K) · B_eᵀ (+ bias_e) for each routing tile of kTile rows of expert e, K summed in order.
// B_e(n, c) = B[e, n, c] (b_k_major, B (E, N, K)) or B[e, c, n] (B (E, K, N)), stored in `dtype`.
struct RowGemmArgs {
    RowOperand A;
    const void* B;     // (E, N, K) | (E, K, N)  dtype
    const void* bias;  // (E, N) dtype, or nullptr
    float* C;          // (S, N)
    const int32_t* tile_expert;
    const int32_t* tile_row0;
    const int32_t* tile_nrows;
    const int32_t* num_tiles;
    int64_t max_tiles, N, K;
    DType dtype;
    bool b_k_major;
};
void launch_row_gemm(const RowGemmArgs& args, cudaStream_t stream);

// The weight gradient C_e (M, L) = Σ_r P(r, :)ᵀ Q(r, :) over expert e's rows in row order, rounded once to dtype;
// experts without rows get zeros. One of P, Q is gathered (dtype), the other an f32 buffer.
struct WeightGradArgs {
    RowOperand P, Q;
    void* C;  // (E, M, L) dtype
    const int32_t* expert_row_start;
    const int32_t* expert_count;
    int64_t E, M, L;
    DType dtype;
};
void launch_weight_grad(const WeightGradArgs& args, cudaStream_t stream);

// The bias gradient out_e (L,) = Σ_r src(r, :) over expert e's rows in row order (the CPU's order), rounded once.
struct ColumnSumArgs {
    RowOperand src;  // gathered (dtype) or f32
    void* out;       // (E, L) dtype
    const int32_t* expert_row_start;
    const int32_t* expert_count;
    int64_t E, L;
    DType dtype;
};
void launch_column_sums(const ColumnSumArgs& args, cudaStream_t stream);

// Per slot s = t·k + j (one CTA each) of routed row r: h = round(gate(A_r)), dw = G_r·h + dO_t·bd_e (the routing
// weight's gradient; sentinel slots get exactly 0), dA_r = gate'(A_r) ⊙ (w G_r). In place: A becomes dA, G becomes h.
// For the tensor-core GEMMs after it (backward_sm90.cu) also dA_r and w·h rounded to the dtype into dA_out, wh_out.
struct GateGradArgs {
    const void* AU;           // (rows, N) the up projection: f32, or the dtype when au_in_dtype
    const float* GH;          // (rows, I) f32: G = dO·Wd
    float* row_w;             // (rows,) the routing weight of each row, out
    const void* dout;         // (T, H) dtype
    const void* down_bias;    // (E, H) dtype, or nullptr
    const void* ids;          // (T, k) int32 | int64
    const void* weights;      // (T, k) f32 | dtype
    void* grad_weights;       // (T, k) f32 | dtype, or nullptr
    const int32_t* slot_row;  // (S,) row of slot s, -1 for a sentinel
    int64_t S, N, I, H, E, k;
    DType dtype;
    bool ids_i64, weights_f32, has_gate;
    GateParams gate;
    // Outputs, each optional (nullptr: not written); the f32 ones may be AU and GH themselves (in place).
    float* dA_f32 = nullptr;          // (rows, N) dA = w·G·act'(...) in f32
    float* h_f32 = nullptr;           // (rows, I) h = act(g)·u, rounded to the dtype, in f32
    void* dA_out = nullptr;           // (rows, N) dA in the dtype
    void* wh_out = nullptr;           // (rows, I) w·h in the dtype
    bool au_in_dtype = false;         // AU holds dtype values (the tensor-core backward's, or the forward's kept)
    const int32_t* au_row = nullptr;  // (S,) AU's row of slot s (the forward's kept rows), or nullptr: slot_row
};
void launch_gate_grad(const GateGradArgs& args, cudaStream_t stream);

// The gate pass of backward call b over a pipeline's f32 buffers and its routing's slot rows.
// dA and h written over AU and GH in f32 (the SIMT backward's buffers); set the outputs for other uses.
inline GateGradArgs gate_grad_args(const ExpertsBackwardArgs& b, const int32_t* slot_row, float* AU, float* GH,
                                   float* row_w) {
    const ExpertsArgs& a = b.fwd;
    return GateGradArgs{.AU = AU,
                        .GH = GH,
                        .row_w = row_w,
                        .dout = b.grad_out,
                        .down_bias = a.down_bias,
                        .ids = a.top_k_index,
                        .weights = a.top_k_weights,
                        .grad_weights = b.grad_weights,
                        .slot_row = slot_row,
                        .S = a.T * a.k,
                        .N = a.has_gate ? 2 * a.I : a.I,
                        .I = a.I,
                        .H = a.H,
                        .E = a.E,
                        .k = a.k,
                        .dtype = a.dtype,
                        .ids_i64 = a.ids_i64,
                        .weights_f32 = a.weights_f32,
                        .has_gate = a.has_gate,
                        .gate = a.gate,
                        .dA_f32 = AU,
                        .h_f32 = GH};
}

// Zeros every padding row (row_slot -1) below *total_rows of each of the (rows_bound, ld[i]) dtype buffers: the
// weight-gradient GEMM sums over whole 64-row blocks of an expert, so what its padding rows hold must be 0.
struct ZeroPaddingArgs {
    void* rows[2];  // nullptr: unused
    int64_t ld[2];
    const int32_t* row_slot;    // (rows_bound,)
    const int32_t* total_rows;  // (1,) rows used
    int64_t rows_bound;
    DType dtype;
};
void launch_zero_padding(const ZeroPaddingArgs& args, cudaStream_t stream);

// dx[t] = Σ_j dX_rows[slot_row[t·k + j]] in slot order (sentinels skipped), rounded once to dtype.
struct TokenSumArgs {
    const void* rows;         // (S, H) f32, or the dtype where rows_f32 is false
    const int32_t* slot_row;  // (S,)
    void* out;                // (T, H) dtype
    int64_t T, H, k;
    DType dtype;
    bool rows_f32;
};
void launch_token_sum(const TokenSumArgs& args, cudaStream_t stream);
// grad_hidden from the dX rows (S, H), f32 (the SIMT backward) or the dtype (the tensor-core one), summed per token.
inline TokenSumArgs token_sum_args(const ExpertsBackwardArgs& b, const int32_t* slot_row, const void* dx_rows,
                                   bool rows_f32) {
    const ExpertsArgs& a = b.fwd;
    return TokenSumArgs{.rows = dx_rows,
                        .slot_row = slot_row,
                        .out = b.grad_hidden,
                        .T = a.T,
                        .H = a.H,
                        .k = a.k,
                        .dtype = a.dtype,
                        .rows_f32 = rows_f32};
}

// The bias gradients of both backward forms, each where asked: per expert, the column sums of dA (au: (rows, N) f32
// in routed-row order) into grad_gate_up_bias and of w·dO (dO's rows by row_slot, scaled by row_w) into grad_down_bias.
void launch_bias_grads(const ExpertsBackwardArgs& b, const int32_t* expert_row_start, const int32_t* expert_count,
                       const int32_t* row_slot, const float* au, const float* row_w, cudaStream_t stream);

}  // namespace moex::cuda::backward
