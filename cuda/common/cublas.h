// CUBLAS_CHECK for cuBLAS and cuBLASLt calls (a failure throws moex::Error(kCuda) naming the call), the cuBLAS
// handle of the calling thread on the current device, and the cuBLAS element type of an activation dtype.
#pragma once

#include <cublas_v2.h>

#include <string>

#include "moex/dtype.h"
#include "moex/error.h"

#define CUBLAS_CHECK(call)                                                                                  \
    do {                                                                                                    \
        const cublasStatus_t moex_st_ = (call);                                                             \
        if (moex_st_ != CUBLAS_STATUS_SUCCESS)                                                              \
            ::moex::fail(::moex::ErrorCode::kCuda, std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                                       ": " #call ": " + cublasGetStatusString(moex_st_));  \
    } while (0)

namespace moex::cuda {

// One handle per (thread, device): cuBLAS handles must not be shared by concurrent host threads. Never destroyed
// (destroying from a thread-exit or static destructor can run after the CUDA runtime has shut down).
cublasHandle_t cublas_handle();

// bf16 | f16 | f32 (the activation dtypes; callers have checked theirs).
inline cudaDataType_t cuda_data_type(DType d) {
    return d == DType::kBF16 ? CUDA_R_16BF : d == DType::kF16 ? CUDA_R_16F : CUDA_R_32F;
}

}  // namespace moex::cuda
