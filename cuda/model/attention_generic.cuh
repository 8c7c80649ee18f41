// The fallback attention for any dtype and head_dim <= 256 (f32 prefill, small test models): one warp per
// (query row, q head). Each lane scores one of 32 keys at a time against the query held in shared memory, the warp
// updates the online softmax once per 32 keys, and P·V runs with the lanes across head_dim. The cache already holds
// the new rows.
#pragma once

#include <cstdint>

#include "cuda/model/model_common.cuh"

namespace moex::cuda::model::generic {

inline constexpr int kWarps = 4;
inline constexpr int kMaxD = 256;

struct GenericParams {
    const void* q;        // (T, nq * D) row-strided
    const void* k_cache;  // (max_len, nkv * D), rows [0, pos0 + T) valid
    const void* v_cache;
    void* out;  // (T, nq * D) row-strided
    int64_t ld_q, ld_cache, ld_out, T, pos0, window, nq;
    int32_t D, G;
    float scale_log2;
};

template <class T>
__global__ void __launch_bounds__(kWarps * 32) attention_generic_kernel(const __grid_constant__ GenericParams p) {
    extern __shared__ float q_all[];  // [kWarps][D]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, D = p.D;
    const int64_t item = int64_t(blockIdx.x) * kWarps + warp;
    if (item >= p.T * p.nq) return;
    const int64_t t = item / p.nq, h = item % p.nq, kvh = h / p.G;
    float* qw = q_all + warp * D;
    const T* q = static_cast<const T*>(p.q) + t * p.ld_q + h * D;
    for (int d = lane; d < D; d += 32) qw[d] = to_f32(q[d]) * p.scale_log2;
    __syncwarp();

    const T* K = static_cast<const T*>(p.k_cache) + kvh * D;
    const T* V = static_cast<const T*>(p.v_cache) + kvh * D;
    const int64_t pos = p.pos0 + t;
    const int64_t lo = p.window > 0 ? max(int64_t(0), pos - p.window + 1) : 0;
    float m = -INFINITY, l = 0.0f, o[kMaxD / 32];
#pragma unroll
    for (int i = 0; i < kMaxD / 32; ++i) o[i] = 0.0f;
    for (int64_t base = lo; base <= pos; base += 32) {
        const int64_t j = base + lane;
        float s = -INFINITY;
        if (j <= pos) {
            const T* kr = K + j * p.ld_cache;
            s = 0.0f;
            for (int d = 0; d < D; ++d) s = fmaf(qw[d], to_f32(kr[d]), s);
        }
        const float m_new = fmaxf(m, warp_max(s));  // finite: key `base` is always valid
        const float pj = exp2f(s - m_new), alpha = exp2f(m - m_new);
        l = l * alpha + warp_sum(pj);
        m = m_new;
#pragma unroll
        for (int i = 0; i < kMaxD / 32; ++i) o[i] *= alpha;
        const int n = int(min(int64_t(32), pos - base + 1));
        for (int jj = 0; jj < n; ++jj) {
            const float pr = __shfl_sync(kFullMask, pj, jj);
            const T* vr = V + (base + jj) * p.ld_cache;
#pragma unroll
            for (int i = 0; i < kMaxD / 32; ++i) {
                const int d = lane + 32 * i;
                if (d < D) o[i] = fmaf(pr, to_f32(vr[d]), o[i]);
            }
        }
    }
    T* out = static_cast<T*>(p.out) + t * p.ld_out + h * D;
#pragma unroll
    for (int i = 0; i < kMaxD / 32; ++i) {
        const int d = lane + 32 * i;
        if (d < D) out[d] = from_f32<T>(o[i] / l);
    }
}

}  // namespace moex::cuda::model::generic
