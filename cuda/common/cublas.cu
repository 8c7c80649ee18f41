// The cuBLAS handle of the calling thread on the current device (cuda/common/cublas.h).
#include <array>

#include "cuda/common/cublas.h"
#include "cuda/common/device.h"

namespace moex::cuda {

cublasHandle_t cublas_handle() {
    thread_local std::array<cublasHandle_t, kMaxDevices> handles{};
    const size_t dev = size_t(current_device());
    if (handles[dev] == nullptr) CUBLAS_CHECK(cublasCreate(&handles[dev]));
    return handles[dev];
}

}  // namespace moex::cuda
