// The tensor-core form of the CUDA experts backward (backward_sm90.cu), which run_experts_backward takes when it can.
#pragma once

#include <cuda_runtime.h>

#include "cuda/backward/backward.h"

namespace moex::cuda {

// Why the tensor-core backward cannot run this call here (nullptr: it can): the device, the dtype (bf16 only), a GEMM
// shape the sm_90a kernels refuse, or MOEX_BACKWARD=simt.
const char* backward_sm90_why_not(const ExpertsBackwardArgs& args);
// The call, checked by run_experts_backward and backward_sm90_why_not first.
void run_experts_backward_sm90(const ExpertsBackwardArgs& args, cudaStream_t stream);

}  // namespace moex::cuda
