// Kernels of the row-wise model ops: embedding gather and KV-cache write (byte copies in 16/4/2-byte units), the
// elementwise ops of Eltwise (16-byte vectors when every row is aligned), and the linear bias epilogue.
#pragma once

#include <cstdint>

#include "cuda/common/pdl.cuh"
#include "cuda/model/internal.h"
#include "cuda/model/model_common.cuh"

namespace moex::cuda::model::elementwise {

inline constexpr int kThreads = 256;
inline constexpr int kInlineIds = 128;  // token ids of short calls travel in the kernel parameters

struct EmbedParams {
    const char* table;       // (V, row_bytes)
    char* out;               // (T, ld_out_bytes)
    const int32_t* ids_dev;  // (T) device copy for long calls, or nullptr: ids below
    int64_t T, row_bytes, ld_out_bytes;
    int32_t ids[kInlineIds];
};

// Unit: uint4, uint32_t or uint16_t, chosen so that every row start is aligned to it.
template <class Unit>
__global__ void __launch_bounds__(kThreads) embed_kernel(const __grid_constant__ EmbedParams p) {
    pdl_enter();  // launched by launch_pdl (cuda/common/pdl.cuh)
    const int64_t units = p.row_bytes / int64_t(sizeof(Unit));
    for (int64_t t = blockIdx.x; t < p.T; t += gridDim.x) {
        const int64_t id = p.ids_dev != nullptr ? int64_t(p.ids_dev[t]) : int64_t(p.ids[t]);
        const Unit* src = reinterpret_cast<const Unit*>(p.table + id * p.row_bytes);
        Unit* dst = reinterpret_cast<Unit*>(p.out + t * p.ld_out_bytes);
        for (int64_t u = threadIdx.x; u < units; u += blockDim.x) dst[u] = src[u];
    }
}

struct KvWriteParams {
    const char* k;
    const char* v;
    char* k_cache;
    char* v_cache;
    int64_t T, pos0, row_bytes, ld_k_bytes, ld_v_bytes;
};

template <class Unit>
__global__ void __launch_bounds__(kThreads) kv_write_kernel(const __grid_constant__ KvWriteParams p) {
    const int64_t units = p.row_bytes / int64_t(sizeof(Unit));
    for (int64_t t = blockIdx.x; t < p.T; t += gridDim.x) {
        const Unit* k = reinterpret_cast<const Unit*>(p.k + t * p.ld_k_bytes);
        const Unit* v = reinterpret_cast<const Unit*>(p.v + t * p.ld_v_bytes);
        Unit* kc = reinterpret_cast<Unit*>(p.k_cache + (p.pos0 + t) * p.row_bytes);
        Unit* vc = reinterpret_cast<Unit*>(p.v_cache + (p.pos0 + t) * p.row_bytes);
        for (int64_t u = threadIdx.x; u < units; u += blockDim.x) kc[u] = k[u], vc[u] = v[u];
    }
}

__device__ __forceinline__ float clamp_keep_nan(float x, float limit) {
    return x != x ? x : fminf(fmaxf(x, -limit), limit);  // torch.clamp propagates NaN
}

// V elements per thread: 1, or kVec16<T> when every row start of every operand is 16-byte aligned. Intermediate
// tensors of the PyTorch modules are rounded as they are there: act(gate) before the product (gated_act),
// sigmoid(gate) and its product with x before the sum (sigmoid_gate_add); _rn intrinsics keep f32 free of FMA
// contraction, so f32 results are the two-rounding ones torch produces.
template <class T, Eltwise OP, int V>
__global__ void __launch_bounds__(kThreads) eltwise_kernel(const __grid_constant__ EltwiseArgs a) {
    const T* A = static_cast<const T*>(a.a);
    const T* B = static_cast<const T*>(a.b);
    T* O = static_cast<T*>(a.out);
    const int64_t step = int64_t(gridDim.x) * blockDim.x * V;
    for (int64_t t = blockIdx.y; t < a.T; t += gridDim.y) {
        const T* arow = A + t * a.ld_a;
        T* orow = O + t * a.ld_out;
        float gate = 0.0f;
        if constexpr (OP == Eltwise::kSigmoidGateAdd) gate = round_to<T>(1.0f / (1.0f + expf(-to_f32(B[t * a.ld_b]))));
        for (int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V; c < a.W; c += step) {
            float x[V], y[V], r[V];
            if constexpr (V == 1) {
                x[0] = to_f32(arow[c]);
            } else {
                load16<T>(arow + c, x);
            }
            if constexpr (OP == Eltwise::kAdd || OP == Eltwise::kSigmoidGateAdd || OP == Eltwise::kGatedAct) {
                const T* src = OP == Eltwise::kAdd        ? B + t * a.ld_b + c
                               : OP == Eltwise::kGatedAct ? arow + a.W + c
                                                          : orow + c;
                if constexpr (V == 1) {
                    y[0] = to_f32(*src);
                } else {
                    load16<T>(src, y);
                }
            }
#pragma unroll
            for (int i = 0; i < V; ++i) {
                if constexpr (OP == Eltwise::kAdd) r[i] = x[i] + y[i];
                if constexpr (OP == Eltwise::kClamp) r[i] = clamp_keep_nan(x[i], a.limit);
                if constexpr (OP == Eltwise::kGatedAct)
                    r[i] = __fmul_rn(round_to<T>(apply_act(a.activation, x[i])), y[i]);
                if constexpr (OP == Eltwise::kSigmoidGateAdd)
                    r[i] = __fadd_rn(y[i], round_to<T>(__fmul_rn(gate, x[i])));
            }
            if constexpr (V == 1) {
                orow[c] = from_f32<T>(r[0]);
            } else {
                store16<T>(orow + c, r);
            }
        }
    }
}

template <class TOut, class TBias>
__global__ void __launch_bounds__(kThreads) bias_epilogue_kernel(const __grid_constant__ BiasEpilogueArgs a) {
    const TBias* bias = static_cast<const TBias*>(a.bias);
    TOut* out = static_cast<TOut*>(a.out);
    for (int64_t t = blockIdx.y; t < a.T; t += gridDim.y)
        for (int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; n < a.N; n += int64_t(gridDim.x) * blockDim.x)
            out[t * a.ld_out + n] = from_f32<TOut>(a.y[t * a.N + n] + to_f32(bias[n]));
}

}  // namespace moex::cuda::model::elementwise
