// Inline PTX shared by the kernels: a shared-memory address as PTX's 32-bit operand, and the 16-byte streaming load
// for data read exactly once (weights in decode).
#pragma once

#include <cstdint>

namespace moex::cuda {

// The 32-bit shared-state-space address of a pointer into shared memory (the operand of cp.async, ldmatrix, mbarrier
// and TMA instructions).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The first 1024-byte aligned byte of dynamic shared memory (the 128-byte swizzle's atom), reached by adding to the
// shared pointer rather than by rounding its integer value: a pointer made from an integer is generic to the compiler,
// so every access through it became a generic LD / ST with 64-bit address arithmetic; this one stays LDS / STS.
__device__ __forceinline__ uint8_t* align_smem_1024(uint8_t* smem_raw) {
    return smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
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
