// Plain device memory and copies (cuda/common/memory.h): tools, tests, bindings and the expert-parallel runner.
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/memory.h"

namespace moex::cuda {

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // no driver / no device: clear the error, report none
        return 0;
    }
    return n;
}

int compute_capability() {
    if (device_count() == 0) return 0;
    const DeviceState& d = device_state();
    return d.cc_major * 10 + d.cc_minor;
}

void* device_alloc(size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
}

void device_free(void* p) {
    if (p != nullptr) CUDA_CHECK(cudaFree(p));
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void device_memset(void* dst, int value, size_t bytes) { CUDA_CHECK(cudaMemset(dst, value, bytes)); }

void device_synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

void copy_async(void* dst, const void* src, size_t bytes, bool to_device, void* stream) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                               static_cast<cudaStream_t>(stream)));
}

void stream_synchronize(void* stream) { CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream))); }

}  // namespace moex::cuda
