// Inline PTX shared by the kernels: cp.async into shared memory, and the 16-byte streaming load for data read exactly
// once (weights in decode).
#pragma once

#include <cstdint>

namespace moex::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// cp.async global -> shared: 16 bytes bypassing L1, or 8 / 4 bytes through it; src_bytes below the size zero-fills
// the rest (0: zeros, src not read). Groups: commit after a batch of copies, wait until at most N are pending.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async8(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ld.global.nc with L1::no_allocate: the weights do not evict the activations that every warp re-reads from L1.
// kPrefetchL2: also ask L2 for the whole 256-byte sector run (the next lines of a weight row stream in sooner).
template <bool kPrefetchL2 = false>
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
    uint4 r;
    if constexpr (kPrefetchL2) {
        asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
            : "l"(p));
    } else {
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
            : "l"(p));
    }
    return r;
}

}  // namespace moex::cuda
