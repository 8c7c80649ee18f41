// TensorView: a non-owning view of a strided tensor (data pointer, dtype, shape, strides in elements, device).
// Views never allocate; Tensor (below) is a small owning host buffer for tools and tests.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "moex/dtype.h"

namespace moex {

inline constexpr int kMaxDims = 4;

struct TensorView {
    void* data = nullptr;
    DType dtype = DType::kF32;
    Device device = Device::kCPU;
    int device_index = 0;
    int ndim = -1;  // -1: absent (an optional tensor that was not given)
    int64_t shape[kMaxDims] = {0, 0, 0, 0};
    int64_t strides[kMaxDims] = {0, 0, 0, 0};  // in elements

    // A row-major contiguous view of `data` with the given shape.
    static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                 Device device = Device::kCPU, int device_index = 0);

    bool defined() const { return ndim >= 0; }
    int64_t size(int d) const { return shape[d]; }
    int64_t numel() const;
    int64_t nbytes() const { return numel() * dtype_size(dtype); }
    bool is_contiguous() const;
    template <class T>
    T* ptr() const {
        return static_cast<T*>(data);
    }
    std::string shape_string() const;  // "(4, 2048)"
};

// A contiguous host tensor that owns its bytes (64-byte aligned).
class Tensor {
   public:
    Tensor() = default;
    Tensor(DType dtype, std::initializer_list<int64_t> shape);
    Tensor(DType dtype, const int64_t* shape, int ndim);
    const TensorView& view() const { return view_; }
    void* data() const { return view_.data; }
    int64_t nbytes() const { return view_.nbytes(); }

   private:
    std::shared_ptr<void> storage_;
    TensorView view_;
};

// Checked size arithmetic: raise moex::Error(kOverflow) instead of wrapping.
int64_t checked_mul(int64_t a, int64_t b, const char* what);
int64_t checked_add(int64_t a, int64_t b, const char* what);

}  // namespace moex
