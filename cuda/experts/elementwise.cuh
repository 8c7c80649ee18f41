// Kernels of elementwise.h: hidden activation (one CTA per row, grid-stride) and combine (one CTA per token and
// column block, 4 columns per thread when H % 4 == 0).
#pragma once

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/experts/elementwise.h"

namespace moex::cuda::elementwise {

template <class T>
__global__ void __launch_bounds__(256) hidden_act_kernel(const __grid_constant__ HiddenActArgs a) {
    const GateParams gp{a.activation, a.gate_kind, a.swiglu_alpha, a.swiglu_limit};
    const int64_t total = *a.total_rows;
    for (int64_t r = blockIdx.x; r < total; r += gridDim.x) {
        const T* bias = nullptr;
        if (a.bias != nullptr) {
            const int s = a.row_slot[r];
            const int e = s >= 0 ? load_expert(a.ids, a.ids_i64, s, a.E) : -1;
            if (e >= 0) bias = static_cast<const T*>(a.bias) + int64_t(e) * a.N;
        }
        const float* u = a.U + r * a.N;
        T* h = static_cast<T*>(a.h) + r * a.I;
        for (int64_t c = threadIdx.x; c < a.I; c += blockDim.x) {
            float v;
            if (a.has_gate) {
                const int64_t gc = a.concatenated ? c : 2 * c, uc = a.concatenated ? a.I + c : 2 * c + 1;
                float gv = u[gc], uv = u[uc];
                if (bias != nullptr) gv += to_f32(bias[gc]), uv += to_f32(bias[uc]);
                v = apply_gate(gp, gv, uv);
            } else {
                float x = u[c];
                if (bias != nullptr) x += to_f32(bias[c]);
                v = apply_act(gp.activation, x);
            }
            h[c] = from_f32<T>(v);
        }
    }
}

template <class T, int V>
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
        const float w = a.weights != nullptr ? load_weight(a.weights, a.weights_f32, int(a.dtype), s) : 1.0f;
        float y[V];
        if constexpr (V == 4) {
            const float4 q = __ldg(reinterpret_cast<const float4*>(a.Y + row * a.H + n));
            y[0] = q.x, y[1] = q.y, y[2] = q.z, y[3] = q.w;
        } else {
            y[0] = a.Y[row * a.H + n];
        }
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

}  // namespace moex::cuda::elementwise
