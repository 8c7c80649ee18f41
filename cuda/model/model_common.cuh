// Device helpers shared by the model kernels: warp reductions, 16-byte vector loads/stores of bf16 or f32 through
// float, and rounding to the activation dtype (the streaming load for weights read once is cuda/common/ptx.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/common/ptx.cuh"

namespace moex::cuda::model {

inline constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
    return v;
}

// v rounded to T and back: the value a PyTorch op that returns a T tensor would hold.
template <class T>
__device__ __forceinline__ float round_to(float v) {
    return to_f32(from_f32<T>(v));
}

// Elements of T in one 16-byte vector.
template <class T>
inline constexpr int kVec16 = 16 / int(sizeof(T));

// 16 bytes (8 bf16 or 4 f32) at p (16-byte aligned) as floats.
template <class T>
__device__ __forceinline__ void unpack16(const uint4& u, float* f) {
    if constexpr (sizeof(T) == 4) {
        f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y);
        f[2] = __uint_as_float(u.z), f[3] = __uint_as_float(u.w);
    } else {
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            __nv_bfloat162 h;
            memcpy(&h, &w[i], 4);
            const float2 p = __bfloat1622float2(h);
            f[2 * i] = p.x, f[2 * i + 1] = p.y;
        }
    }
}

template <class T>
__device__ __forceinline__ uint4 pack16(const float* f) {
    uint4 u;
    if constexpr (sizeof(T) == 4) {
        u.x = __float_as_uint(f[0]), u.y = __float_as_uint(f[1]);
        u.z = __float_as_uint(f[2]), u.w = __float_as_uint(f[3]);
    } else {
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
            memcpy(&w[i], &h, 4);
        }
        u.x = w[0], u.y = w[1], u.z = w[2], u.w = w[3];
    }
    return u;
}

template <class T>
__device__ __forceinline__ void load16(const T* p, float* f) {
    unpack16<T>(*reinterpret_cast<const uint4*>(p), f);
}

template <class T>
__device__ __forceinline__ void store16(T* p, const float* f) {
    *reinterpret_cast<uint4*>(p) = pack16<T>(f);
}

}  // namespace moex::cuda::model
