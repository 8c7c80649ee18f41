// The CUDA side of expert parallelism's row movement (src/ep/rows.h is the host API over it): a row gather by index,
// the fixed-order combine, and stream-ordered copies. Plain pointers; every CUDA failure is a moex::Error(kCuda).
#pragma once

#include <cstdint>

namespace moex::cuda::ep {

void gather_rows(void* dst, const void* src, const int64_t* idx, int64_t n, int64_t row_bytes, void* stream);
void combine_rows(void* out, const void* y, const int64_t* rows, const float* w, int64_t T, int64_t M, int64_t H,
                  int dtype /* 0 bf16, 1 f16, 2 f32 */, void* stream);
void copy_async(void* dst, const void* src, int64_t bytes, bool to_device, void* stream);
void sync(void* stream);
void* alloc(int64_t bytes);
void release(void* p);

}  // namespace moex::cuda::ep
