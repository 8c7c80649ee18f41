// The skinny linear for decode (T <= 4 rows of x): one warp per output column n streams w[n, :] once with 16-byte
// L1-bypassing loads, 8 in flight per lane, and dots it with the T rows of x (L1-resident), f32 accumulation, bias
// and one rounding in the epilogue. On an H200 this is a pure weight stream: 151936 x 2048 bf16 (lm_head) is 622 MB.
// Launched by launch_pdl (cuda/common/pdl.cuh).
#pragma once

#include <cstdint>

#include "cuda/common/pdl.cuh"
#include "cuda/model/model_common.cuh"

namespace moex::cuda::model::gemv {

inline constexpr int kThreads = 256;
inline constexpr int kUnroll = 8;       // 16-byte weight loads in flight per lane
inline constexpr int kBlocksPerSm = 4;  // <= 64 registers: 4 CTAs of 256 threads fill an SM

struct GemvParams {
    const void* x;     // (T, K) row-strided, 16-byte aligned rows
    const void* w;     // (N, K) contiguous, 16-byte aligned rows
    const void* bias;  // (N) or nullptr
    void* out;         // (T, N) row-strided
    int64_t T, N, K, ld_x, ld_out;
};

template <class TIn, class TOut, int TT>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) gemv_kernel(const __grid_constant__ GemvParams p) {
    constexpr int E = kVec16<TIn>;
    const int lane = threadIdx.x & 31;
    const int64_t chunks = p.K / E;
    const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);
    pdl_enter();
    const TIn* x = static_cast<const TIn*>(p.x);
    for (int64_t n = int64_t(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5); n < p.N; n += warps) {
        const uint4* wrow = reinterpret_cast<const uint4*>(static_cast<const TIn*>(p.w) + n * p.K);
        float acc[TT];
#pragma unroll
        for (int t = 0; t < TT; ++t) acc[t] = 0.0f;
        for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kUnroll) {
            uint4 wv[kUnroll];
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int64_t c = c0 + 32 * u;
                wv[u] = c < chunks ? ld_stream16(wrow + c) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < kUnroll; ++u) {
                const int64_t c = c0 + 32 * u;
                if (c >= chunks) break;
                float wf[E];
                unpack16<TIn>(wv[u], wf);
#pragma unroll
                for (int t = 0; t < TT; ++t) {
                    if (t >= p.T) break;
                    float xf[E];
                    load16<TIn>(x + t * p.ld_x + c * E, xf);
#pragma unroll
                    for (int e = 0; e < E; ++e) acc[t] = fmaf(wf[e], xf[e], acc[t]);
                }
            }
        }
        const float b = p.bias != nullptr ? to_f32(static_cast<const TIn*>(p.bias)[n]) : 0.0f;
#pragma unroll
        for (int t = 0; t < TT; ++t) {
            const float s = warp_sum(acc[t]);
            if (lane == 0 && t < p.T) static_cast<TOut*>(p.out)[t * p.ld_out + n] = from_f32<TOut>(s + b);
        }
    }
}

}  // namespace moex::cuda::model::gemv
