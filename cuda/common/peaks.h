// The card's own ceilings for the benchmarks' floors, measured in the same run instead of taken from a table:
// streaming read and copy bandwidth, and dense GEMM rates in bf16 (cuBLAS) and FP8 e4m3 (cuBLASLt). Plain C++.
#pragma once

#include <string>

namespace moex::cuda {

struct DevicePeaks {
    double read_gbps = 0;    // a streaming-read kernel over a buffer far past L2, 1e9 bytes read per second
    double copy_gbps = 0;    // cudaMemcpyAsync device to device, (read + written bytes) per second
    double bf16_gflops = 0;  // cuBLAS bf16 x bf16 -> bf16 (f32 accumulation), n x n x n
    double fp8_gflops = 0;   // cuBLASLt e4m3 x e4m3 -> bf16 (f32 accumulation), n x n x n; 0 when refused
    std::string fp8_why;     // why fp8_gflops is 0
    int gemm_n = 0;
    std::string device;  // the device's name
};

// Best of a few repetitions of each; `bytes` is the read buffer (default 4 GiB), `gemm_n` the GEMM size.
DevicePeaks measure_device_peaks(size_t bytes, int gemm_n);

}  // namespace moex::cuda
