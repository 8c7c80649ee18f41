// Row movement of EP calls on the host or a CUDA device: gather rows by index, the fixed-order weighted combine,
// and the few copies the runner needs. Pointers are on `device`; every CUDA failure is a moex::Error(kCuda).
#pragma once

#include <cstdint>

#include "moex/dtype.h"

namespace moex::ep {

// dst[i] = src[idx[i]], i < n, rows of row_bytes bytes. idx (n) lives on `device`.
void gather_rows(Device device, void* dst, const void* src, const int64_t* idx, int64_t n, int64_t row_bytes,
                 void* stream);

// out[t] = round_dtype(sum over m = 0..M-1 of w[t, m] * y[rows[t, m]]) with an f32 accumulator in m order; rows < 0
// are skipped, w == nullptr means 1. y and out are (., H) in `dtype`; rows and w (T, M) live on `device`.
// Host: acc += w * y, as the CPU combine; CUDA: acc = fma(y, w, acc), as the CUDA combine kernel.
void combine_rows(Device device, void* out, const void* y, const int64_t* rows, const float* w, int64_t T, int64_t M,
                  int64_t H, DType dtype, void* stream);

// Copies between the host and `device` ordered on `stream` (plain memcpy on the host), and a stream sync.
void copy_bytes(Device device, void* dst, const void* src, int64_t bytes, bool to_device, void* stream);
void sync_stream(Device device, void* stream);
void* device_malloc(Device device, int64_t bytes);
void device_release(Device device, void* p);

}  // namespace moex::ep
