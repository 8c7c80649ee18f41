// Kernels of the normalisations and the rotary embedding: RMSNorm over groups of a row (one CTA per group), and the
// per-head kernel that applies q/k RMSNorm and the rotary embedding to every head of a row in one pass (one warp per
// head, the head staged in shared memory so that rotate-half can read its partner element).
#pragma once

#include <cstdint>

#include "cuda/common/pdl.cuh"
#include "cuda/model/model_common.cuh"
#include "cuda/model/model_ops.h"

namespace moex::cuda::model::norm {

// Sum over the CTA; `red` holds 32 floats. Safe to call repeatedly (it waits before reusing `red`).
__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_sum(lane < nw ? red[lane] : 0.0f);
}

// out = round(w * round(x * rsqrt(mean(x^2) + eps))): transformers casts the normalised value to the input dtype
// before the weight multiplies it. V elements per thread (16-byte vectors when aligned, else 1).
template <class T, int V>
__global__ void __launch_bounds__(512) rms_norm_kernel(const __grid_constant__ RmsNormArgs a) {
    pdl_enter();  // launched by launch_pdl (cuda/common/pdl.cuh)
    __shared__ float red[32];
    const T* X = static_cast<const T*>(a.x);
    const T* W = static_cast<const T*>(a.w);
    T* O = static_cast<T*>(a.out);
    const int64_t groups = a.width / a.group;
    for (int64_t t = blockIdx.y; t < a.T; t += gridDim.y) {
        for (int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
            const T* x = X + t * a.ld_x + g * a.group;
            T* o = O + t * a.ld_out + g * a.group;
            float ss = 0.0f;
            for (int64_t c = int64_t(threadIdx.x) * V; c < a.group; c += int64_t(blockDim.x) * V) {
                float v[V];
                if constexpr (V == 1) {
                    v[0] = to_f32(x[c]);
                } else {
                    load16<T>(x + c, v);
                }
#pragma unroll
                for (int i = 0; i < V; ++i) ss = fmaf(v[i], v[i], ss);
            }
            const float r = rsqrtf(block_sum(ss, red) / float(a.group) + a.eps);
            for (int64_t c = int64_t(threadIdx.x) * V; c < a.group; c += int64_t(blockDim.x) * V) {
                float v[V], w[V];
                if constexpr (V == 1) {
                    v[0] = to_f32(x[c]), w[0] = to_f32(W[c]);
                } else {
                    load16<T>(x + c, v), load16<T>(W + c, w);
                }
#pragma unroll
                for (int i = 0; i < V; ++i) v[i] = w[i] * round_to<T>(v[i] * r);
                if constexpr (V == 1) {
                    o[c] = from_f32<T>(v[0]);
                } else {
                    store16<T>(o + c, v);
                }
            }
        }
    }
}

// The residual add and the norm that follows it: sum = round(a + b) is stored, then normalised as rms_norm_kernel
// does with group = W. One CTA per row; each thread re-reads only the sum elements it wrote itself.
template <class T, int V>
__global__ void __launch_bounds__(512) add_rms_norm_kernel(const __grid_constant__ AddRmsNormArgs a) {
    pdl_enter();  // launched by launch_pdl (cuda/common/pdl.cuh)
    __shared__ float red[32];
    const T* A = static_cast<const T*>(a.a);
    const T* B = static_cast<const T*>(a.b);
    const T* W = static_cast<const T*>(a.w);
    for (int64_t t = blockIdx.x; t < a.T; t += gridDim.x) {
        T* sum = static_cast<T*>(a.sum) + t * a.ld_sum;
        T* out = static_cast<T*>(a.out) + t * a.ld_out;
        float ss = 0.0f;
        for (int64_t c = int64_t(threadIdx.x) * V; c < a.W; c += int64_t(blockDim.x) * V) {
            float x[V], y[V];
            if constexpr (V == 1) {
                x[0] = to_f32(A[t * a.ld_a + c]), y[0] = to_f32(B[t * a.ld_b + c]);
            } else {
                load16<T>(A + t * a.ld_a + c, x), load16<T>(B + t * a.ld_b + c, y);
            }
#pragma unroll
            for (int i = 0; i < V; ++i) {
                x[i] = round_to<T>(x[i] + y[i]);
                ss = fmaf(x[i], x[i], ss);
            }
            if constexpr (V == 1) {
                sum[c] = from_f32<T>(x[0]);
            } else {
                store16<T>(sum + c, x);
            }
        }
        const float r = rsqrtf(block_sum(ss, red) / float(a.W) + a.eps);
        for (int64_t c = int64_t(threadIdx.x) * V; c < a.W; c += int64_t(blockDim.x) * V) {
            float x[V], w[V];
            if constexpr (V == 1) {
                x[0] = to_f32(sum[c]), w[0] = to_f32(W[c]);
            } else {
                load16<T>(sum + c, x), load16<T>(W + c, w);
            }
#pragma unroll
            for (int i = 0; i < V; ++i) x[i] = w[i] * round_to<T>(x[i] * r);
            if constexpr (V == 1) {
                out[c] = from_f32<T>(x[0]);
            } else {
                store16<T>(out + c, x);
            }
        }
    }
}

struct HeadNormRopeParams {
    void* x;  // (T, heads * D) row-strided, in place
    int64_t T, heads, D, ld, pos0;
    const int64_t* pos_device;  // when set, pos0 is read from it
    const void* norm_w[2];
    int64_t norm_begin[2], norm_end[2];
    float norm_eps[2];
    int32_t num_norms, rotary_dim;
    float attention_scaling;
    float inv_freq[kMaxRotaryHalf];
};

// CTA = `blockDim.x / 32` heads of one row; shared memory: cos, sin (rotary_dim / 2 each), then D floats per warp.
template <class T>
__global__ void __launch_bounds__(256) head_norm_rope_kernel(const __grid_constant__ HeadNormRopeParams p) {
    pdl_enter();  // launched by launch_pdl (cuda/common/pdl.cuh)
    extern __shared__ float smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int half = p.rotary_dim / 2, D = int(p.D);
    float* cs = smem;
    float* sn = smem + half;
    float* hv = smem + 2 * half + warp * D;
    T* X = static_cast<T*>(p.x);
    const int64_t pos0 = p.pos_device != nullptr ? *p.pos_device : p.pos0;
    for (int64_t t = blockIdx.y; t < p.T; t += gridDim.y) {
        __syncthreads();  // the previous row's cos/sin are no longer read
        // transformers: freqs = inv_freq * pos in f32; cos/sin * attention_scaling, cast to the activation dtype.
        const float pos = float(pos0 + t);
        for (int i = threadIdx.x; i < half; i += blockDim.x) {
            float s, c;
            sincosf(pos * p.inv_freq[i], &s, &c);
            cs[i] = round_to<T>(c * p.attention_scaling);
            sn[i] = round_to<T>(s * p.attention_scaling);
        }
        __syncthreads();
        for (int64_t h = int64_t(blockIdx.x) * warps + warp; h < p.heads; h += int64_t(gridDim.x) * warps) {
            T* xh = X + t * p.ld + h * p.D;
            int which = -1;
            for (int i = 0; i < p.num_norms; ++i)
                if (h >= p.norm_begin[i] && h < p.norm_end[i]) which = i;
            float ss = 0.0f;
            for (int d = lane; d < D; d += 32) {
                const float v = to_f32(xh[d]);
                hv[d] = v;
                ss = fmaf(v, v, ss);
            }
            if (which >= 0) {
                const T* w = static_cast<const T*>(p.norm_w[which]);
                const float r = rsqrtf(warp_sum(ss) / float(D) + p.norm_eps[which]);
                for (int d = lane; d < D; d += 32) hv[d] = round_to<T>(to_f32(w[d]) * round_to<T>(hv[d] * r));
            }
            __syncwarp();
            for (int d = lane; d < D; d += 32) {
                float o = hv[d];
                if (d < p.rotary_dim) {  // x * cos + rotate_half(x) * sin: each product and the sum rounded
                    const int i = d < half ? d : d - half;
                    const float rot = d < half ? -hv[d + half] : hv[d - half];
                    o = __fadd_rn(round_to<T>(__fmul_rn(hv[d], cs[i])), round_to<T>(__fmul_rn(rot, sn[i])));
                }
                xh[d] = from_f32<T>(o);
            }
            __syncwarp();  // hv is rewritten by the next head
        }
    }
}

}  // namespace moex::cuda::model::norm
