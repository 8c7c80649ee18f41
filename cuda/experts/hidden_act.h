// The hidden activation of the eager and ungated grouped pipelines: h = gate(U + bias) (or act(U + bias) when
// ungated), one row per routed slot, rounded to the activation dtype as a torch bf16/f16 tensor would be.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/params.h"
#include "moex/dtype.h"

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
    DType dtype;
    bool ids_i64, has_gate;
    GateParams gate;
    int64_t tail_rows =
        0;  // rows from *total_rows (below rows_bound) that get h = 0, U not read: packed tiles read them
};
void launch_hidden_act(const HiddenActArgs& args, cudaStream_t stream);

}  // namespace moex::cuda
