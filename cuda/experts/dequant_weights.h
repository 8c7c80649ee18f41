// Quantized expert weights rewritten as bf16 on the device, for the experts a call routes to: the deepgemm pipeline's
// FP4 path on Hopper, whose tensor cores have no FP4 input (DeepGEMM itself refuses FP4 before sm_100). Each weight
// is code * scale (* global, when the scales carry one) rounded to bf16 once: exact for mxfp4 (e2m1 times a power of
// two) and for nvfp4's code * e4m3 scale (at most 6 significant bits); the deepgemm pipeline leaves nvfp4's global
// scale out and applies it to the GEMM accumulators (rounding the product with it moved outputs by up to 4% rms).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/params.h"

namespace moex::cuda {

// hit[e] = 1 for every expert some slot routes to, 0 for the others (ids outside [0, E) mark nothing).
void launch_mark_experts(const void* ids, bool ids_i64, int64_t S, int64_t E, int32_t* hit, cudaStream_t stream);

struct DequantWeightsArgs {
    const void* codes;  // (E, R, C) K-major: packed e2m1 (two per byte, low nibble first) or e4m3 bytes
    WeightScales scales;
    int64_t E, R, C;     // C % 8 == 0
    const int32_t* hit;  // (E,): experts whose weights are written; the others are left as they are
    void* out;           // (E, R, C) bf16
};
void launch_dequantize_weights(const DequantWeightsArgs& args, cudaStream_t stream);

}  // namespace moex::cuda
