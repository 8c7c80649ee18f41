// What `moex bench` measures about the machine before any case: CPU model, ISA, last-level cache size, and the two
// floor terms — streaming read bandwidth of a buffer far larger than the cache, and the best dense GEMM rate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moex/dtype.h"

namespace moex::bench {

struct CpuInfo {
    std::string model;  // /proc/cpuinfo "model name"
    int hardware_threads = 1;
    int64_t llc_bytes = 0;   // last-level cache size
    std::string llc_source;  // where llc_bytes came from
    std::string isa;         // e.g. "avx2 fma f16c" or "avx2 fma f16c avx512f avx512bf16"
    std::string kernels;     // the CPU kernel table every CPU backend runs (src/cpu/kernels.h), e.g. "avx512_bf16"
    std::string pinning;     // the pool's thread placement (src/cpu/placement.h): "off" or "on: CPUs ..."
};
CpuInfo probe_cpu();

struct GemmRate {
    std::string what;  // e.g. "OpenBLAS cblas_sgemm f32"
    double gflops = 0;
};

struct MachineFloor {
    double read_gbps = 0;  // best multithreaded streaming read, 1e9 bytes/s
    int64_t read_buffer_bytes = 0;
    std::string read_what;        // where read_gbps came from: the best read kernel, CUDA's measurement, --peak-gbps
    std::vector<GemmRate> gemms;  // every dense GEMM measured; the floor uses the fastest
    double gemm_gflops = 0;
    std::string gemm_best;
    int64_t gemm_size = 0;           // M = N = K of the fastest GEMM (the CPU floor's; 0: a --peer-gemm)
    std::vector<std::string> notes;  // what could not be measured, and why
    std::string device;              // CUDA: the card measured (its name); empty on the CPU
};

// Multithreaded reads of a `bytes`-sized buffer by every read kernel this CPU runs (AVX-512 and AVX2, 1 to 8 streams
// per thread, plain, vmovntdqa and prefetchnta loads), `tries` passes each after `settle_seconds` of untimed passes:
// the best, in 1e9 bytes/s.
struct ReadBandwidth {
    double gbps = 0;
    std::string best;  // the kernel that reached it
    std::string all;   // "kernel GB/s" of each kernel
};
ReadBandwidth measure_read_bandwidth(int threads, int64_t bytes, int tries, double settle_seconds = 0);

// Memory bandwidth plus dense C = A·Bᵀ GEMM at n×n×n: OpenBLAS's and MKL's sgemm and bf16 GEMMs (loaded with dlopen,
// so the program depends on neither), moex::cpu::dense_gemm with f32 weights and with `weight_dtype` weights. The read
// buffer is settled first (`settle_seconds`, moex bench --settle-seconds).
MachineFloor measure_floor(int threads, DType weight_dtype, int64_t read_bytes, int64_t gemm_n,
                           double settle_seconds = 0);

}  // namespace moex::bench
