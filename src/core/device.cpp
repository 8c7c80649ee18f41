// DeviceTensor: host buffers through Tensor, CUDA buffers through cuda/launch.h.
#include "moex/device.h"

#include <cstring>

#include "moex/error.h"
#if MOEX_WITH_CUDA
#include "cuda/common/memory.h"
#endif

namespace moex {

DeviceTensor::DeviceTensor(DType dtype, const int64_t* shape, int ndim, Device device) {
    if (device == Device::kCPU) {
        Tensor t(dtype, shape, ndim);
        view_ = t.view();
        storage_ = std::shared_ptr<void>(std::make_shared<Tensor>(std::move(t)), t.data());
        return;
    }
#if MOEX_WITH_CUDA
    view_ = TensorView::contiguous(nullptr, dtype, {}, device);
    view_.ndim = ndim;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; --d) {
        view_.shape[d] = shape[d];
        view_.strides[d] = stride;
        stride = checked_mul(stride, shape[d] > 0 ? shape[d] : 1, "device tensor strides");
    }
    const size_t bytes = size_t(checked_mul(view_.numel(), dtype_size(dtype), "device tensor bytes"));
    void* p = cuda::device_alloc(bytes > 0 ? bytes : 1);
    storage_ = std::shared_ptr<void>(p, [](void* q) { cuda::device_free(q); });
    view_.data = p;
#else
    (void)dtype, (void)shape, (void)ndim;
    fail(ErrorCode::kUnsupported, "this build of moex has no CUDA support");
#endif
}

DeviceTensor DeviceTensor::from_host(const TensorView& host, Device device) {
    MOEX_REQUIRE(host.device == Device::kCPU && host.is_contiguous(), ErrorCode::kInvalidArgument,
                 "from_host needs a contiguous host tensor");
    DeviceTensor t(host.dtype, host.shape, host.ndim, device);
    const size_t bytes = size_t(host.nbytes());
    if (bytes == 0) return t;
#if MOEX_WITH_CUDA
    if (device == Device::kCUDA) {
        cuda::copy_to_device(t.view_.data, host.data, bytes);
        return t;
    }
#endif
    std::memcpy(t.view_.data, host.data, bytes);
    return t;
}

void DeviceTensor::copy_to_host(const TensorView& host) const {
    MOEX_REQUIRE(host.device == Device::kCPU && host.is_contiguous() && host.nbytes() == view_.nbytes() &&
                     host.dtype == view_.dtype,
                 ErrorCode::kInvalidArgument, "copy_to_host needs a contiguous host tensor of the same size and dtype");
    const size_t bytes = size_t(host.nbytes());
    if (bytes == 0) return;
#if MOEX_WITH_CUDA
    if (view_.device == Device::kCUDA) return cuda::copy_to_host(host.data, view_.data, bytes);
#endif
    std::memcpy(host.data, view_.data, bytes);
}

void DeviceTensor::fill_bytes(uint8_t value) {
    const size_t bytes = size_t(view_.nbytes());
    if (bytes == 0) return;
#if MOEX_WITH_CUDA
    if (view_.device == Device::kCUDA) return cuda::device_memset(view_.data, value, bytes);
#endif
    std::memset(view_.data, value, bytes);
}

int cuda_device_count() {
#if MOEX_WITH_CUDA
    return cuda::device_count();
#else
    return 0;
#endif
}

int cuda_compute_capability() {
#if MOEX_WITH_CUDA
    return cuda::compute_capability();
#else
    return 0;
#endif
}

void device_synchronize(Device device) {
#if MOEX_WITH_CUDA
    if (device == Device::kCUDA) cuda::device_synchronize();
#else
    (void)device;
#endif
}

}  // namespace moex
