// DeviceTensor: an owning contiguous buffer on the host or a CUDA device, for tools, tests and bindings.
#pragma once

#include <memory>

#include "moex/tensor.h"

namespace moex {

class DeviceTensor {
   public:
    DeviceTensor() = default;
    DeviceTensor(DType dtype, const int64_t* shape, int ndim, Device device);
    // A device copy of a contiguous host view (device == kCPU makes a host copy).
    static DeviceTensor from_host(const TensorView& host, Device device);
    void copy_to_host(const TensorView& host) const;  // host must be contiguous with the same shape and dtype
    void fill_bytes(uint8_t value);                   // e.g. 0xff to poison an output before a run
    const TensorView& view() const { return view_; }

   private:
    std::shared_ptr<void> storage_;
    TensorView view_;
};

int cuda_device_count();  // 0 in a build without CUDA or on a machine without a GPU
// The current CUDA device's compute capability as major·10 + minor (90: Hopper, where the sm_90a kernels run); 0 in a
// build without CUDA or on a machine without a GPU.
int cuda_compute_capability();
void device_synchronize(Device device);

}  // namespace moex
