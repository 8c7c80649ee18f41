// Where a routed row of a backward operand starts (RowOperand, backward_kernels.h): shared by the GEMM and the
// row-wise kernels.
#pragma once

#include <cstdint>

#include "cuda/backward/backward_kernels.h"

namespace moex::cuda::backward {

// Element offset of routed row r's first element: token row_slot[r] / k of a gathered (T, ld) tensor, else row r.
__device__ __forceinline__ int64_t operand_offset(const RowOperand& o, int r) {
    const int64_t src = o.row_slot ? int64_t(o.row_slot[r] / o.k) : int64_t(r);
    return src * o.ld;
}

}  // namespace moex::cuda::backward
