// MOEX_HOST_DEVICE: pure functions that run on the host (choosers, their tests) and in kernels alike;
// MOEX_HOST_DEVICE_INLINE: the same, forced inline in kernels (a scheduler's decode on every tile).
#pragma once

#if defined(__CUDACC__)
#define MOEX_HOST_DEVICE __host__ __device__
#define MOEX_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#else
#define MOEX_HOST_DEVICE
#define MOEX_HOST_DEVICE_INLINE inline
#endif
