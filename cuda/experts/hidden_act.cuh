// The hidden-activation kernel of hidden_act.h: one CTA per row, grid-stride over the rows in use.
#pragma once

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/experts/hidden_act.h"

namespace moex::cuda::hidden_act {

template <class T>
__global__ void __launch_bounds__(256) hidden_act_kernel(const __grid_constant__ HiddenActArgs a) {
    const int64_t total = *a.total_rows, end = total + a.tail_rows < a.rows_bound ? total + a.tail_rows : a.rows_bound;
    const bool concat = a.gate.concatenated;
    for (int64_t r = blockIdx.x; r < end; r += gridDim.x) {
        if (r >= total) {
            for (int64_t c = threadIdx.x; c < a.I; c += blockDim.x)
                static_cast<T*>(a.h)[r * a.I + c] = from_f32<T>(0.f);
            continue;
        }
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
                const int64_t gc = concat ? c : 2 * c, uc = concat ? a.I + c : 2 * c + 1;
                float gv = u[gc], uv = u[uc];
                if (bias != nullptr) gv += to_f32(bias[gc]), uv += to_f32(bias[uc]);
                v = apply_gate(a.gate, gv, uv);
            } else {
                float x = u[c];
                if (bias != nullptr) x += to_f32(bias[c]);
                v = apply_act(a.gate.activation, x);
            }
            h[c] = from_f32<T>(v);
        }
    }
}

}  // namespace moex::cuda::hidden_act
