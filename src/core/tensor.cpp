// TensorView helpers, the owning host Tensor, dtype/device names and checked size arithmetic.
#include "moex/tensor.h"

#include <cstdlib>
#include <string>

#include "moex/error.h"

namespace moex {

std::optional<DType> dtype_from_name(std::string_view n) {
    if (n == "bfloat16" || n == "bf16") return DType::kBF16;
    if (n == "float16" || n == "f16" || n == "half") return DType::kF16;
    if (n == "float32" || n == "f32" || n == "float") return DType::kF32;
    if (n == "float64" || n == "f64" || n == "double") return DType::kF64;
    if (n == "float8_e4m3fn" || n == "fp8" || n == "e4m3") return DType::kFP8E4M3;
    if (n == "float8_e8m0fnu" || n == "ue8m0") return DType::kUE8M0;
    if (n == "int32" || n == "i32") return DType::kI32;
    if (n == "int64" || n == "i64") return DType::kI64;
    if (n == "uint8" || n == "u8") return DType::kU8;
    return std::nullopt;
}

std::optional<Device> device_from_name(std::string_view n) {
    if (n == "cpu") return Device::kCPU;
    if (n == "cuda" || n == "gpu") return Device::kCUDA;
    return std::nullopt;
}

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
        fail(ErrorCode::kOverflow, std::string("size overflow computing ") + what);
    return r;
}

int64_t checked_add(int64_t a, int64_t b, const char* what) {
    int64_t r;
    if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &r))
        fail(ErrorCode::kOverflow, std::string("size overflow computing ") + what);
    return r;
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device,
                                  int device_index) {
    MOEX_REQUIRE(shape.size() <= size_t(kMaxDims), ErrorCode::kInvalidArgument, "tensor has more than 4 dimensions");
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.device = device;
    v.device_index = device_index;
    v.ndim = int(shape.size());
    int i = 0;
    for (int64_t s : shape) {
        MOEX_REQUIRE(s >= 0, ErrorCode::kInvalidArgument, "negative tensor dimension");
        v.shape[i++] = s;
    }
    int64_t stride = 1;
    for (int d = v.ndim - 1; d >= 0; --d) {
        v.strides[d] = stride;
        stride = checked_mul(stride, v.shape[d] > 0 ? v.shape[d] : 1, "tensor strides");
    }
    return v;
}

int64_t TensorView::numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n = checked_mul(n, shape[d], "tensor element count");
    return ndim < 0 ? 0 : n;
}

bool TensorView::is_contiguous() const {
    for (int d = 0; d < ndim; ++d)
        if (shape[d] == 0) return true;  // no elements: whatever the strides (libFuzzer found shape [0, 0] refused)
    int64_t expect = 1;
    for (int d = ndim - 1; d >= 0; --d) {
        if (shape[d] != 1 && strides[d] != expect) return false;
        expect *= shape[d];
    }
    return true;
}

std::string TensorView::shape_string() const {
    if (!defined()) return "(absent)";
    std::string s = "(";
    for (int d = 0; d < ndim; ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
    return s + (ndim == 1 ? ",)" : ")");
}

Tensor::Tensor(DType dtype, std::initializer_list<int64_t> shape) : Tensor(dtype, shape.begin(), int(shape.size())) {}

Tensor::Tensor(DType dtype, const int64_t* shape, int ndim) {
    MOEX_REQUIRE(ndim >= 0 && ndim <= kMaxDims, ErrorCode::kInvalidArgument, "tensor rank must be 0..4");
    view_.dtype = dtype;
    view_.ndim = ndim;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; --d) {
        MOEX_REQUIRE(shape[d] >= 0, ErrorCode::kInvalidArgument, "negative tensor dimension");
        view_.shape[d] = shape[d];
        view_.strides[d] = stride;
        stride = checked_mul(stride, shape[d] > 0 ? shape[d] : 1, "tensor strides");
    }
    const int64_t bytes = checked_mul(view_.numel(), dtype_size(dtype), "tensor bytes");
    const size_t alloc = size_t((bytes + 63) / 64 * 64 + 64);
    void* p = std::aligned_alloc(64, alloc);
    MOEX_REQUIRE(p != nullptr, ErrorCode::kIo, "out of host memory allocating " + std::to_string(bytes) + " bytes");
    storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
    view_.data = p;
}

}  // namespace moex
