// Hopper (sm_90a) tensor-core layer: shared-memory matrix descriptors for 128-byte-swizzled tiles, the
// wgmma.mma_async m64n256k16 instruction (bf16/f16 in, f32 accumulate), m64n128k32 for e4m3 operands and the warpgroup
// fences and register reconfiguration (setmaxnreg) that go with it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

// TUTORIAL: WGMMA descriptors. A warpgroup (4 warps) issues `wgmma.mma_async.m64nNk16`: D(64xN, f32, in
// registers) += A(64x16) · B(16xN), with A and B read by the tensor cores straight from shared memory through
// 64-bit descriptors. Our tiles are written by TMA with the 128-byte swizzle: each 128-byte line (64 bf16) of a
// tile is split into eight 16-byte chunks and chunk j of line r is stored at chunk position j ^ (r % 8). Eight
// lines (1024 bytes, 1024-aligned) form one swizzle atom. The descriptor says where the operand starts and how
// to step between atoms; the hardware applies the same XOR on the address bits, so the tile base must be 1024-
// byte aligned (the descriptor's base-offset field stays 0).
//   bits  0-13  start address >> 4          bits 32-45  stride byte offset (SBO) >> 4
//   bits 16-29  leading byte offset (LBO) >> 4     bits 62-63  swizzle: 1 = 128B
// K-major operand (A always; B when stored (E, N, K)): a line is 64 K-values of one row. SBO = 1024 (next 8 rows);
//   LBO is unused for swizzled K-major. The k-th 16-wide K slice starts 32·k bytes into the line: adding 32·k to
//   the start address is enough, the hardware swizzles the rest. Rows: A's second 64-row half starts 8 KB later.
// MN-major operand (B stored (E, K, N), instruction flag tnspB = 1): a line is 64 N-values of one k. TMA boxes of
//   64 N x 64 K (8 KB each) are laid side by side along N. SBO = 1024 (next 8 k-lines), LBO = 8192 (next 64 N
//   values = next box); the k-th 16-deep K slice starts 16 lines = 2048 bytes later.
// Accumulator layout (m64nNk16, f32): thread t of the warpgroup, warp w = t / 32, lane l: register 4j + i holds
//   row 16w + l/4 + 8·(i / 2), column 8j + 2·(l % 4) + (i % 2), for j in [0, N/8).

namespace moex::cuda::sm90 {

inline constexpr uint32_t kSwizzleAtomBytes = 1024;

// Descriptor for a 128B-swizzled operand starting at shared byte address `addr`.
__device__ __forceinline__ uint64_t make_smem_desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
    const uint64_t lo = ((addr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFFu) << 16);
    const uint64_t hi = ((sbo_bytes >> 4) & 0x3FFFu) | (1u << 30);  // bit 62 of the descriptor: 128B swizzle
    return lo | (hi << 32);
}
// Moves a descriptor's start address by `bytes` (a multiple of 16; stays inside the 256 KB shared window).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads/writes across the asynchronous MMA boundary.
template <int kN>
__device__ __forceinline__ void fence_accumulators(float (&d)[kN]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Register budget per warpgroup role; the kernel must start with a cap (__launch_bounds__(threads, 1)).
template <uint32_t kRegs>
__device__ __forceinline__ void regs_raise() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <uint32_t kRegs>
__device__ __forceinline__ void regs_lower() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

#define MOEX_WGMMA_D4(i) "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define MOEX_WGMMA_D16(i) MOEX_WGMMA_D4(i), MOEX_WGMMA_D4((i) + 4), MOEX_WGMMA_D4((i) + 8), MOEX_WGMMA_D4((i) + 12)
#define MOEX_WGMMA_D64(i) \
    MOEX_WGMMA_D16(i), MOEX_WGMMA_D16((i) + 16), MOEX_WGMMA_D16((i) + 32), MOEX_WGMMA_D16((i) + 48)
#define MOEX_WGMMA_D128 MOEX_WGMMA_D64(0), MOEX_WGMMA_D64(64)
#define MOEX_WGMMA_DREGS                                                                           \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                      \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "             \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "             \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "             \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "             \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "             \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

// d(64x256 per warpgroup) = (accumulate ? d : 0) + A(64x16) · B(16x256). T: __nv_bfloat16 or __half.
// kTransB: B is MN-major in shared memory (weights stored (E, K, N)); kTransA: A is MN-major (the weight gradient's
// rows, weight_grad_sm90.cuh), its descriptor built as B's MN-major one.
template <typename T, bool kTransB, bool kTransA = false>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                 uint32_t accumulate) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " MOEX_WGMMA_DREGS
            ", %128, %129, p, 1, 1, %132, %131;\n}"
            : MOEX_WGMMA_D128
            : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransB ? 1 : 0), "n"(kTransA ? 1 : 0));
    } else {
        static_assert(std::is_same_v<T, __half>, "wgmma operands are bf16 or f16");
        asm volatile(
            "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 " MOEX_WGMMA_DREGS
            ", %128, %129, p, 1, 1, %132, %131;\n}"
            : MOEX_WGMMA_D128
            : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransB ? 1 : 0), "n"(kTransA ? 1 : 0));
    }
}

// One 64-deep K block of a stage as four m64n256k16, slice k at a_off + k·a_step and b_off + k·b_step bytes past the
// descriptors, issued and committed as one group (nothing waited for: the caller may work beside them). The first
// slice of block 0 starts d from zero.
template <typename T, bool kTransB, bool kTransA = false>
__device__ __forceinline__ void wgmma_k64_issue(float (&d)[128], uint64_t desc_a, uint32_t a_off, uint32_t a_step,
                                                uint64_t desc_b, uint32_t b_off, uint32_t b_step, uint32_t kb) {
    fence_accumulators(d);
    wgmma_fence();
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k)
        wgmma_m64n256k16<T, kTransB, kTransA>(d, desc_advance(desc_a, a_off + k * a_step),
                                              desc_advance(desc_b, b_off + k * b_step), kb | k);
    wgmma_commit();
    fence_accumulators(d);
}
// wgmma_k64_issue, then the previous block's group waited for (wgmma.wait_group 1): on return the caller may release
// the previous stage while this block's MMAs stay in flight.
template <typename T, bool kTransB, bool kTransA = false>
__device__ __forceinline__ void wgmma_k64_block(float (&d)[128], uint64_t desc_a, uint32_t a_off, uint32_t a_step,
                                                uint64_t desc_b, uint32_t b_off, uint32_t b_step, uint32_t kb) {
    wgmma_k64_issue<T, kTransB, kTransA>(d, desc_a, a_off, a_step, desc_b, b_off, b_step, kb);
    wgmma_wait<1>();
}

#define MOEX_WGMMA_D64_REGS                                                            \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "          \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// d(64x128 per warpgroup) = (accumulate ? d : 0) + A(64x32) · B(32x128), both e4m3 and K-major (FP8 wgmma has no
// transpose), f32 accumulation. A 32-deep K slice of FP8 is 32 bytes: the descriptors step as for k16 of bf16.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                      uint32_t accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " MOEX_WGMMA_D64_REGS ", %64, %65, p, 1, 1;\n}"
        : MOEX_WGMMA_D64(0)
        : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

#undef MOEX_WGMMA_D64_REGS
#undef MOEX_WGMMA_D4
#undef MOEX_WGMMA_D16
#undef MOEX_WGMMA_D64
#undef MOEX_WGMMA_D128
#undef MOEX_WGMMA_DREGS

}  // namespace moex::cuda::sm90
