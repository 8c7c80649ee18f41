// CUDA_CHECK / MOEX_LAUNCH_CHECK: every CUDA call and every kernel launch is checked, and a failure
// throws moex::Error(ErrorCode::kCuda, "file:line: <cudaGetErrorString>") so the caller sees where and why.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "moex/error.h"

namespace moex::cuda {

[[noreturn]] inline void throw_cuda(cudaError_t err, const char* what, const char* file, int line) {
    fail(ErrorCode::kCuda, std::string(file) + ":" + std::to_string(line) + ": " + what + ": " + cudaGetErrorName(err) +
                               " (" + cudaGetErrorString(err) + ")");
}

}  // namespace moex::cuda

#define CUDA_CHECK(call)                                                                              \
    do {                                                                                              \
        const cudaError_t moex_err_ = (call);                                                         \
        if (moex_err_ != cudaSuccess) ::moex::cuda::throw_cuda(moex_err_, #call, __FILE__, __LINE__); \
    } while (0)

// After every <<<...>>>: launch-configuration errors surface here, not at the next unrelated call.
#define MOEX_LAUNCH_CHECK()                                                                                     \
    do {                                                                                                        \
        const cudaError_t moex_err_ = cudaGetLastError();                                                       \
        if (moex_err_ != cudaSuccess) ::moex::cuda::throw_cuda(moex_err_, "kernel launch", __FILE__, __LINE__); \
    } while (0)
