// The CUDA side of expert parallelism's row movement (src/ep/rows.h is the host API over it): a row gather by index
// and the fixed-order combine. Plain pointers; every CUDA failure is a moex::Error(kCuda). Copies:
// cuda/common/memory.h.
#pragma once

#include <cstdint>

#include "moex/dtype.h"

namespace moex::cuda::ep {

void gather_rows(void* dst, const void* src, const int64_t* idx, int64_t n, int64_t row_bytes, void* stream);
void combine_rows(void* out, const void* y, const int64_t* rows, const float* w, int64_t T, int64_t M, int64_t H,
                  DType dtype, void* stream);

}  // namespace moex::cuda::ep
