// The deterministic combine of the eager, grouped and long batched pipelines: out[t] = sum over the k slots of t of
// (y + bias) * w, summed in fp32 in slot order (no atomics) and rounded once. The rows y are float32, or the
// activation dtype where the pipeline rounded each weighted row once already (grouped_mm in bf16).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moex/dtype.h"

namespace moex::cuda {

// out[t, :] = sum_{j<k, slot valid} (Y[row(s), :] + bias_e) * w[s], s = t*k + j, summed in fp32 in slot order.
struct CombineArgs {
    const void* Y;            // (rows, H) float32, or the dtype when !y_f32
    const int32_t* slot_row;  // (S,) row of slot s in Y (-1: sentinel), or nullptr: row = s
    const void* ids;          // (S,) int32 | int64, ids outside [0, E) contribute nothing
    const void* bias;         // (E, H) dtype, or nullptr
    const void* weights;      // (S,) float32 | dtype, or nullptr (Y already weighted)
    void* out;                // (T, H) dtype
    int64_t T, H, k, E;
    DType dtype;
    bool ids_i64, weights_f32;
    bool y_f32 = true;
};
void launch_combine(const CombineArgs& args, cudaStream_t stream);

}  // namespace moex::cuda
