// Row-wise kernels shared by the eager and grouped pipelines: the hidden activation (bias + gate or act, rounded to
// the activation dtype) and the deterministic combine out[t] = sum_j y[row(t, j)] in slot order (no atomics).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/launch.h"

namespace moex::cuda {

// h[r, c] = gate(U[r, gate col] + b, U[r, up col] + b) (gated) or act(U[r, c] + b), stored in dtype.
struct HiddenActArgs {
    const float* U;             // (rows_bound, N) float32, the up projection before bias/gate
    void* h;                    // (rows_bound, I) dtype
    const void* bias;           // (E, N) dtype, or nullptr (already added)
    const int32_t* row_slot;    // (rows_bound,) slot of each row (-1 padding); read only when bias != nullptr
    const void* ids;            // (S,) expert of each slot (for the bias)
    const int32_t* total_rows;  // (1,) rows in use
    int64_t rows_bound, N, I, E;
    ActDType dtype;
    bool ids_i64, has_gate, concatenated;
    int32_t activation, gate_kind;
    float swiglu_alpha, swiglu_limit;
};
void launch_hidden_act(const HiddenActArgs& args, cudaStream_t stream);

// out[t, :] = sum_{j<k, slot valid} (Y[row(s), :] + bias_e) * w[s], s = t*k + j, summed in fp32 in slot order.
struct CombineArgs {
    const float* Y;           // (rows, H) float32
    const int32_t* slot_row;  // (S,) row of slot s in Y (-1: sentinel), or nullptr: row = s
    const void* ids;          // (S,) int32 | int64, ids outside [0, E) contribute nothing
    const void* bias;         // (E, H) dtype, or nullptr
    const void* weights;      // (S,) float32 | dtype, or nullptr (Y already weighted)
    void* out;                // (T, H) dtype
    int64_t T, H, k, E;
    ActDType dtype;
    bool ids_i64, weights_f32;
};
void launch_combine(const CombineArgs& args, cudaStream_t stream);

}  // namespace moex::cuda
