// Kernels of the router (softmax + top-k, one warp per token) and of the device argmax (grid-wide, the last CTA to
// arrive reduces the per-CTA partials and stores the index into pinned host memory, so the host waits for one launch).
#pragma once

#include <climits>
#include <cstdint>

#include "cuda/common/pdl.cuh"
#include "cuda/model/model_common.cuh"
#include "cuda/model/model_ops.h"

namespace moex::cuda::model::router {

inline constexpr int kWarps = 4;

// (v, i) beats (bv, bi): larger value, lower index on ties; NaN never beats anything.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

__device__ __forceinline__ void warp_best(float& bv, int& bi) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(kFullMask, bv, o);
        const int oi = __shfl_xor_sync(kFullMask, bi, o);
        if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
}

// transformers: p = softmax(logits, dtype=float32); top-k of p; p /= sum(top-k p) when normalize; cast to dtype.
// Shared memory per warp: E probabilities, then k selected values.
template <class TL, class TW>
__global__ void __launch_bounds__(kWarps * 32) router_topk_kernel(const __grid_constant__ RouterTopkArgs a) {
    pdl_enter();  // launched by launch_pdl (cuda/common/pdl.cuh)
    extern __shared__ float smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int E = int(a.E), k = int(a.k);
    float* p = smem + warp * (E + k);
    float* sel = p + E;
    const TL* logits = static_cast<const TL*>(a.logits);
    TW* weights = static_cast<TW*>(a.weights);
    for (int64_t t = int64_t(blockIdx.x) * kWarps + warp; t < a.T; t += int64_t(gridDim.x) * kWarps) {
        const TL* row = logits + t * a.ld_logits;
        float mx = -INFINITY;
        for (int e = lane; e < E; e += 32) {
            const float v = to_f32(row[e]);
            p[e] = v;
            mx = fmaxf(mx, v);
        }
        mx = warp_max(mx);
        float sum = 0.0f;
        for (int e = lane; e < E; e += 32) {
            const float ex = expf(p[e] - mx);
            p[e] = ex;
            sum += ex;
        }
        sum = warp_sum(sum);
        for (int e = lane; e < E; e += 32) p[e] = p[e] / sum;
        __syncwarp();
        float picked_sum = 0.0f;
        for (int j = 0; j < k; ++j) {
            float bv = -INFINITY;
            int bi = INT_MAX;
            for (int e = lane; e < E; e += 32)
                if (better(p[e], e, bv, bi)) bv = p[e], bi = e;
            warp_best(bv, bi);
            if (bi == INT_MAX) bi = 0, bv = 0.0f;  // only NaN left: keep the id in range
            __syncwarp();
            if (lane == 0) {
                a.ids[t * a.k + j] = bi;
                sel[j] = bv;
                p[bi] = -INFINITY;  // taken
            }
            picked_sum += bv;
            __syncwarp();
        }
        for (int j = lane; j < k; j += 32) {
            const float w = a.normalize ? sel[j] / picked_sum : sel[j];
            weights[t * a.k + j] = from_f32<TW>(w);
        }
        __syncwarp();
    }
}

inline constexpr int kArgmaxThreads = 512;

struct ArgmaxParams {
    const void* x;  // (n)
    int64_t n;
    float* part_v;     // (gridDim.x)
    int32_t* part_i;   // (gridDim.x)
    int32_t* counter;  // (1) zero between launches
    int32_t* host;     // (1) the Context's pinned host word, through its device address
    int32_t* id;       // (1) on the device, or nullptr
    int64_t* advance;  // (1) on the device, += 1, or nullptr
};

__device__ __forceinline__ void block_best(float& bv, int& bi, float* sv, int* si) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    warp_best(bv, bi);
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (warp == 0) {
        bv = lane < nw ? sv[lane] : -INFINITY;
        bi = lane < nw ? si[lane] : INT_MAX;
        warp_best(bv, bi);
    }
}

template <class T>
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const __grid_constant__ ArgmaxParams p) {
    pdl_enter();  // launched by launch_pdl (cuda/common/pdl.cuh)
    __shared__ float sv[32];
    __shared__ int si[32];
    __shared__ bool last;
    const T* x = static_cast<const T*>(p.x);
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.n; i += int64_t(gridDim.x) * blockDim.x) {
        const float v = to_f32(x[i]);
        if (better(v, int(i), bv, bi)) bv = v, bi = int(i);
    }
    block_best(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        p.part_v[blockIdx.x] = bv;
        p.part_i[blockIdx.x] = bi;
        __threadfence();  // the partial is visible before the arrival is counted
        last = atomicAdd(p.counter, 1) == int(gridDim.x) - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    bv = -INFINITY, bi = INT_MAX;
    for (int b = threadIdx.x; b < int(gridDim.x); b += blockDim.x) {
        const float v = __ldcg(p.part_v + b);
        const int i = __ldcg(p.part_i + b);
        if (better(v, i, bv, bi)) bv = v, bi = i;
    }
    __syncthreads();  // sv/si are reused
    block_best(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        const int32_t r = bi == INT_MAX ? 0 : bi;
        *p.host = r;
        if (p.id != nullptr) *p.id = r;
        if (p.advance != nullptr) *p.advance += 1;
        *p.counter = 0;  // ready for the next launch
    }
}

}  // namespace moex::cuda::model::router
