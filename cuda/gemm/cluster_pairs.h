// The 2-CTA cluster launches of the sm_90a GEMMs (grouped_gemm_sm90, weight_grad_sm90) ask, once per kernel and
// device, how many CTA pairs can be resident, after opting the kernel in to its dynamic shared memory.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <mutex>

#include "cuda/common/device.h"

namespace moex::cuda {

// Opts `kernel` in to `smem` bytes of dynamic shared memory and returns how many 2-CTA clusters of `threads` threads
// fit the device at once (0: clusters unavailable; the caller then launches unpaired). Throws on CUDA errors.
int query_resident_pairs(const void* kernel, unsigned threads, size_t smem);

// query_resident_pairs once per kernel and device.
template <auto kKernel>
int resident_pairs(int dev, unsigned threads, size_t smem) {
    static std::mutex mu;
    static std::array<int, kMaxDevices> pairs{};
    static std::array<bool, kMaxDevices> done{};
    std::lock_guard<std::mutex> lock(mu);
    if (!done[size_t(dev)]) {
        pairs[size_t(dev)] = query_resident_pairs(reinterpret_cast<const void*>(kKernel), threads, smem);
        done[size_t(dev)] = true;
    }
    return pairs[size_t(dev)];
}

}  // namespace moex::cuda
