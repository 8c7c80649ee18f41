// View helpers of the Ops and the forward pass: the first rows of a 2-D scratch buffer, a column block of a row-strided
// matrix (q, k and v inside the fused qkv rows), and 2-D device buffers.
#pragma once

#include "moex/device.h"
#include "moex/tensor.h"

namespace moex::model {

inline DeviceTensor buffer(DType dtype, int64_t rows, int64_t cols, Device device) {
    const int64_t shape[2] = {rows, cols};
    return DeviceTensor(dtype, shape, 2, device);
}

inline TensorView first_rows(const TensorView& t, int64_t n) {
    TensorView v = t;
    v.shape[0] = n;
    return v;
}
inline TensorView first_rows(const DeviceTensor& t, int64_t n) { return first_rows(t.view(), n); }

// A contiguous (rows, cols) view at the start of a scratch buffer allocated wider (rows * cols must fit in it).
inline TensorView packed(const DeviceTensor& t, int64_t rows, int64_t cols) {
    TensorView v = first_rows(t, rows);
    v.shape[1] = cols;
    v.strides[0] = cols;
    return v;
}

// Rows [r, r + n) of a 2-D view.
inline TensorView row_block(const TensorView& t, int64_t r, int64_t n) {
    TensorView v = t;
    v.data = static_cast<char*>(t.data) + r * t.strides[0] * dtype_size(t.dtype);
    v.shape[0] = n;
    return v;
}

// Columns [c, c + width) of a 2-D view; the row stride is kept.
inline TensorView column_block(const TensorView& t, int64_t c, int64_t width) {
    TensorView v = t;
    v.data = static_cast<char*>(t.data) + c * dtype_size(t.dtype);
    v.shape[1] = width;
    return v;
}

}  // namespace moex::model
