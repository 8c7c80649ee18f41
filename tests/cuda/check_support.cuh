// What the standalone GPU checks of tests/cuda/ share: a CUDA error check that ends the program, a wait with a
// deadline (a pipeline deadlock ends the run with a message instead of hanging it), a device buffer, the
// counter-based hash the inputs are drawn from, and the host decode of the 16-bit outputs.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

namespace moex::test::gpu {

#define CK(x) ::moex::test::gpu::check_cuda((x), #x, __LINE__)
inline void check_cuda(cudaError_t e, const char* what, int line) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "CUDA error %s at line %d: %s\n", cudaGetErrorString(e), line, what);
        std::exit(2);
    }
}

// Waits for the device with a deadline: a pipeline deadlock must end the run with a message, not hang it.
inline void sync_or_die(const char* what, double seconds = 20.0) {
    cudaEvent_t ev;
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CK(cudaEventRecord(ev, nullptr));
    const auto start = std::chrono::steady_clock::now();
    cudaError_t st;
    while ((st = cudaEventQuery(ev)) == cudaErrorNotReady) {
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) {
            std::printf("FAIL HANG: %s did not finish in %.0f s (exiting; the device needs a reset)\n", what, seconds);
            std::fflush(stdout);
            std::_Exit(3);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CK(st);
    CK(cudaEventDestroy(ev));
}

// Uniform in [0, 1) from (seed, index): the same value wherever it is drawn.
__device__ __forceinline__ float hash_uniform(uint64_t seed, uint64_t i) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + i + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

struct DevBuf {
    void* p = nullptr;
    size_t bytes = 0;
    explicit DevBuf(size_t n = 0) : bytes(n) {
        if (n) CK(cudaMalloc(&p, n));
    }
    ~DevBuf() {
        if (p) cudaFree(p);
    }
    DevBuf(const DevBuf&) = delete;
    DevBuf& operator=(const DevBuf&) = delete;
    DevBuf& operator=(DevBuf&& o) noexcept {
        std::swap(p, o.p);
        std::swap(bytes, o.bytes);
        return *this;
    }
    template <typename T>
    T* as() const {
        return static_cast<T*>(p);
    }
};

// Element i of a host copy of device output: kind 0 bf16, 1 f16, 2 f32.
inline float host_to_float(const void* base, size_t i, int kind) {
    if (kind == 2) return static_cast<const float*>(base)[i];
    uint16_t bits;
    std::memcpy(&bits, static_cast<const uint8_t*>(base) + 2 * i, 2);
    if (kind == 0) {
        const uint32_t w = uint32_t(bits) << 16;
        float f;
        std::memcpy(&f, &w, 4);
        return f;
    }
    __half h;
    std::memcpy(&h, &bits, 2);
    return __half2float(h);
}

}  // namespace moex::test::gpu
