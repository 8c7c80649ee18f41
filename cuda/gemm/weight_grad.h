// The expert weight gradient as one grouped GEMM (the training backward, cuda/backward/): for every expert e,
// C[e] (M, N) = Σ_r A[r, :]ᵀ · B[r, :] over e's rows of the padded-contiguous layout (grouped_gemm.h), f32
// accumulation in row order, rounded once to the dtype. The sum runs over the rows, so both operands are read
// MN-major (row r holds M, or N, consecutive values). Row counts come from device memory: no host sync.
#pragma once

#include <cstdint>

#include "moex/dtype.h"

namespace moex::cuda {

struct WeightGradGemmArgs {
    const void* A;                    // (P, M) dtype; rows past an expert's count up to its block's end are zero
    const void* B;                    // (P, N) dtype; the same
    void* C;                          // (E, M, N) dtype; an expert without rows gets zeros
    const int32_t* expert_row_start;  // (E + 1,) start of each expert's block, a multiple of kRowAlign
    const int32_t* expert_row_count;  // (E,) its rows
    int64_t P, M, N, E;
    DType dtype;  // bf16 or f16
};

// Why the sm_90a kernel cannot run these arguments on the current device (nullptr: it can).
const char* weight_grad_sm90_why_not(const WeightGradGemmArgs& args);
// Runs it; a refusal (weight_grad_sm90_why_not) is a moex::Error(kUnsupported) naming the reason.
void launch_weight_grad_sm90(const WeightGradGemmArgs& args, void* stream);

}  // namespace moex::cuda
