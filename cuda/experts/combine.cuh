// The combine kernel of combine.h: one CTA per token and column block, V columns per thread: one 16-byte load per
// row where H and the rows allow (4 float or 8 16-bit columns), else 4 16-bit columns or 1. Y is the type of the
// rows: float, or the activation type T.
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda/common/numeric.cuh"
#include "cuda/experts/combine.h"

namespace moex::cuda::combine {

// The V values of a Y row as loaded: one 16-byte or 8-byte word, or one value.
template <class Y, int V>
struct Raw {
    static constexpr int kBytes = V * int(sizeof(Y));
    using Word = std::conditional_t<kBytes == 16, uint4, std::conditional_t<kBytes == 8, uint2, Y>>;
    static_assert(sizeof(Word) == V * sizeof(Y), "V values of Y: 16 bytes, 8 bytes or one value");
    Word w;

    __device__ __forceinline__ void load(const Y* p) { w = __ldg(reinterpret_cast<const Word*>(p)); }
    __device__ __forceinline__ float at(int i) const {
        Y v[V];
        memcpy(v, &w, sizeof(w));
        return to_f32(v[i]);
    }
};

// Slots a thread resolves and loads before it sums them: a token's rows are independent loads, and one slot at a
// time (its id, then its row, then the row's values, then the next slot) kept ~16 KB in flight per SM.
inline constexpr int kSlotChunk = 4;

template <class T, class Y, int V>
__global__ void __launch_bounds__(256) combine_kernel(const __grid_constant__ CombineArgs a) {
    const int64_t t = blockIdx.x;
    const int64_t n = (int64_t(blockIdx.y) * blockDim.x + threadIdx.x) * V;
    if (n >= a.H) return;
    float acc[V];
#pragma unroll
    for (int v = 0; v < V; ++v) acc[v] = 0.0f;
    for (int64_t j0 = 0; j0 < a.k; j0 += kSlotChunk) {
        // The chunk's ids, rows and weights as independent loads (no load waits on another), then each slot's row:
        // -1 past k, for a sentinel id, or for a slot without a row.
        int64_t row[kSlotChunk];  // 64-bit: without slot_row a row is its slot, and T·k may pass 2^31
        int e[kSlotChunk];
        float w[kSlotChunk];
#pragma unroll
        for (int c = 0; c < kSlotChunk; ++c) {
            const int64_t s = t * a.k + j0 + c;
            const bool in = j0 + c < a.k;
            e[c] = in ? load_expert(a.ids, a.ids_i64, s, a.E) : -1;
            row[c] = !in ? -1 : a.slot_row != nullptr ? int64_t(a.slot_row[s]) : s;
            w[c] = in && a.weights != nullptr ? load_weight(a.weights, a.weights_f32, a.dtype, s) : 1.0f;
        }
#pragma unroll
        for (int c = 0; c < kSlotChunk; ++c) row[c] = e[c] < 0 ? -1 : row[c];
        Raw<Y, V> y[kSlotChunk];
#pragma unroll
        for (int c = 0; c < kSlotChunk; ++c)
            if (row[c] >= 0) y[c].load(static_cast<const Y*>(a.Y) + row[c] * a.H + n);
#pragma unroll
        for (int c = 0; c < kSlotChunk; ++c) {  // slot order, the same operations as one slot at a time
            if (row[c] < 0) continue;
#pragma unroll
            for (int v = 0; v < V; ++v) {
                float b = a.bias != nullptr ? to_f32(static_cast<const T*>(a.bias)[int64_t(e[c]) * a.H + n + v]) : 0.0f;
                acc[v] += (y[c].at(v) + b) * w[c];
            }
        }
    }
    T* out = static_cast<T*>(a.out) + t * a.H + n;
    if constexpr (V * sizeof(T) == 16) {  // one 16-byte store where the output row allows it
        if (reinterpret_cast<uintptr_t>(out) % 16 == 0) {
            T o[V];
#pragma unroll
            for (int v = 0; v < V; ++v) o[v] = from_f32<T>(acc[v]);
            uint4 q;
            memcpy(&q, o, sizeof(q));
            *reinterpret_cast<uint4*>(out) = q;
            return;
        }
    }
#pragma unroll
    for (int v = 0; v < V; ++v) out[v] = from_f32<T>(acc[v]);
}

}  // namespace moex::cuda::combine
