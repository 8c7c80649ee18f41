// The combine kernel of combine.h: one CTA per token and column block, 4 columns per thread when H % 4 == 0. Y is
// the type of the rows: float, or the activation type T.
#pragma once

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/experts/combine.h"

namespace moex::cuda::combine {

// V consecutive values of a Y row as float (V = 4: one 16-byte load of floats, one 8-byte load of 16-bit values).
template <class Y, int V>
__device__ __forceinline__ void load_row(const Y* p, float (&y)[V]) {
    if constexpr (V == 4 && sizeof(Y) == 4) {
        const float4 q = __ldg(reinterpret_cast<const float4*>(p));
        y[0] = q.x, y[1] = q.y, y[2] = q.z, y[3] = q.w;
    } else if constexpr (V == 4) {
        const uint2 q = __ldg(reinterpret_cast<const uint2*>(p));
        Y v[4];
        static_assert(sizeof(v) == sizeof(q));
        memcpy(v, &q, sizeof(q));
#pragma unroll
        for (int i = 0; i < 4; ++i) y[i] = to_f32(v[i]);
    } else {
        y[0] = to_f32(p[0]);
    }
}

template <class T, class Y, int V>
__global__ void __launch_bounds__(256) combine_kernel(const __grid_constant__ CombineArgs a) {
    const int64_t t = blockIdx.x;
    const int64_t n = (int64_t(blockIdx.y) * blockDim.x + threadIdx.x) * V;
    if (n >= a.H) return;
    float acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = 0.0f;
    for (int64_t j = 0; j < a.k; ++j) {
        const int64_t s = t * a.k + j;
        const int e = load_expert(a.ids, a.ids_i64, s, a.E);
        if (e < 0) continue;
        const int64_t row = a.slot_row != nullptr ? int64_t(a.slot_row[s]) : s;
        if (row < 0) continue;
        const float w = a.weights != nullptr ? load_weight(a.weights, a.weights_f32, a.dtype, s) : 1.0f;
        float y[V];
        load_row<Y, V>(static_cast<const Y*>(a.Y) + row * a.H + n, y);
#pragma unroll
        for (int v = 0; v < V; ++v) {
            float b = a.bias != nullptr ? to_f32(static_cast<const T*>(a.bias)[int64_t(e) * a.H + n + v]) : 0.0f;
            acc[v] += (y[v] + b) * w;
        }
    }
    T* out = static_cast<T*>(a.out) + t * a.H + n;
#pragma unroll
    for (int v = 0; v < V; ++v) out[v] = from_f32<T>(acc[v]);
}

}  // namespace moex::cuda::combine
