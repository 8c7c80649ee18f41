// The backward's row-wise kernels: the gate and its derivative per slot (libm, in the CPU backward's formulas), the
// per-token gather-sum of dx in slot order and the per-expert column sums of the bias gradients in row order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/backward/backward_kernels.h"
#include "cuda/backward/operand.cuh"
#include "cuda/common/numeric.cuh"

namespace moex::cuda::backward {

inline constexpr int kGateThreads = 128;

// x as `dt` rounds it, back in f32 (h is rounded to the activation dtype before the down projection).
__device__ __forceinline__ float round_to_dtype(float x, DType dt) {
    if (dt == DType::kBF16) return __bfloat162float(__float2bfloat16_rn(x));
    if (dt == DType::kF16) return __half2float(__float2half_rn(x));
    return x;
}

__device__ __forceinline__ void store_as(void* p, int64_t i, DType dt, float v) {
    if (dt == DType::kBF16) {
        static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
    } else if (dt == DType::kF16) {
        static_cast<__half*>(p)[i] = __float2half_rn(v);
    } else {
        static_cast<float*>(p)[i] = v;
    }
}

// act(x) and act'(x), as src/cpu/backward_gate.cpp computes them.
__device__ __forceinline__ void act_and_slope(Activation a, float x, float& value, float& slope) {
    switch (a) {
        case Activation::kSilu: {
            const float s = 1.0f / (1.0f + expf(-x));
            value = x * s, slope = s * (1.0f + x * (1.0f - s));
            return;
        }
        case Activation::kGelu: {
            const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
            value = x * cdf, slope = cdf + x * 0.39894228040143268f * expf(-0.5f * x * x);
            return;
        }
        case Activation::kGeluTanh: {
            const float c = 0.79788456080286536f;  // sqrt(2/pi)
            const float t = tanhf(c * (x + 0.044715f * x * x * x));
            value = 0.5f * x * (1.0f + t);
            slope = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * 0.044715f * x * x);
            return;
        }
        case Activation::kRelu: break;
    }
    value = x < 0.0f ? 0.0f : x;  // NaN stays NaN, as in the forward
    slope = x > 0.0f ? 1.0f : 0.0f;
}

// h = gate(g, u) and its partials dg, du; ungated reads u only (dg = 0).
__device__ __forceinline__ void gate_pair(const GateParams& p, bool gated, float g, float u, float& h, float& dg,
                                          float& du) {
    if (!gated) {
        act_and_slope(p.activation, u, h, du);
        dg = 0.0f;
        return;
    }
    if (p.kind == GateKind::kGptOss) {  // g' = min(g, l), u' = clamp(u, -l, l), h = (u' + 1) g' sigmoid(alpha g')
        const float l = p.limit, gc = l < g ? l : g, uc = u < -l ? -l : (l < u ? l : u);
        const float s = 1.0f / (1.0f + expf(-p.alpha * gc));
        h = (uc + 1.0f) * (gc * s);
        dg = g <= l ? (uc + 1.0f) * s * (1.0f + p.alpha * gc * (1.0f - s)) : 0.0f;
        du = -l <= u && u <= l ? gc * s : 0.0f;
        return;
    }
    float a, slope;
    act_and_slope(p.activation, g, a, slope);
    h = a * u, dg = slope * u, du = a;
}

// Sum over the CTA (kGateThreads threads), the same tree every time; the result in every thread.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float partial[kGateThreads / 32];
#pragma unroll
    for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kGateThreads / 32; ++w) total += partial[w];
    __syncthreads();  // partial is reused by the next slot
    return total;
}

// One CTA per slot (grid-stride over slots; the slot is the same in every thread, so the branches are uniform).
template <class T>
__global__ void __launch_bounds__(kGateThreads) gate_grad_kernel(const __grid_constant__ GateGradArgs a) {
    const DType w_dtype = a.weights_f32 ? DType::kF32 : a.dtype;
    for (int64_t s = blockIdx.x; s < a.S; s += gridDim.x) {
        const int row = a.slot_row[s];
        if (row < 0) {  // sentinel: no row, and exactly 0 for its weight
            if (a.grad_weights && threadIdx.x == 0) store_as(a.grad_weights, s, w_dtype, 0.0f);
            continue;
        }
        const float w = load_weight(a.weights, a.weights_f32, a.dtype, s);
        float* au = a.AU + int64_t(row) * a.N;
        float* gh = a.GH + int64_t(row) * a.I;
        float dot = 0.0f;
        for (int64_t i = threadIdx.x; i < a.I; i += kGateThreads) {
            const int64_t cg = !a.has_gate ? i : a.gate.concatenated ? i : 2 * i;
            const int64_t cu = !a.has_gate ? i : a.gate.concatenated ? a.I + i : 2 * i + 1;
            float h, dg, du;
            gate_pair(a.gate, a.has_gate, au[cg], au[cu], h, dg, du);
            h = round_to_dtype(h, a.dtype);
            const float G = gh[i], dh = w * G;
            dot += G * h;
            gh[i] = h;
            if (a.has_gate) au[cg] = dh * dg;
            au[cu] = dh * du;
            if (a.dA_out) {
                if (a.has_gate) store_as(a.dA_out, int64_t(row) * a.N + cg, a.dtype, dh * dg);
                store_as(a.dA_out, int64_t(row) * a.N + cu, a.dtype, dh * du);
            }
            if (a.wh_out) store_as(a.wh_out, int64_t(row) * a.I + i, a.dtype, w * h);
        }
        if (a.down_bias) {
            const int e = load_expert(a.ids, a.ids_i64, s, a.E);  // in [0, E): the slot has a row
            const T* bd = static_cast<const T*>(a.down_bias) + int64_t(e) * a.H;
            const T* dO = static_cast<const T*>(a.dout) + (s / a.k) * a.H;
            for (int64_t c = threadIdx.x; c < a.H; c += kGateThreads) dot += to_f32(dO[c]) * to_f32(bd[c]);
        }
        const float dw = block_sum(dot);
        if (threadIdx.x == 0) {
            a.row_w[row] = w;
            if (a.grad_weights) store_as(a.grad_weights, s, w_dtype, dw);
        }
    }
}

// One warp per row, grid-stride over rows; 16-bit elements written two at a time (ld is even: the GEMMs' 8-multiples).
__global__ void __launch_bounds__(256) zero_padding_kernel(const __grid_constant__ ZeroPaddingArgs a) {
    const int64_t used = min(int64_t(*a.total_rows), a.rows_bound);
    const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32), lane = threadIdx.x % 32;
    const int64_t esize = a.dtype == DType::kF32 ? 4 : 2;
    for (int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < used; r += warps) {
        if (a.row_slot[r] >= 0) continue;
        for (int b = 0; b < 2; ++b) {
            if (a.rows[b] == nullptr) continue;
            auto* row = static_cast<uint32_t*>(a.rows[b]) + r * a.ld[b] * esize / 4;
            for (int64_t c = lane; c < a.ld[b] * esize / 4; c += 32) row[c] = 0u;
        }
    }
}

// One thread per (t, c), grid-stride: the k slots in order, sentinels skipped.
template <class T>
__global__ void __launch_bounds__(256) token_sum_kernel(const __grid_constant__ TokenSumArgs a) {
    const int64_t n = a.T * a.H;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = i / a.H, c = i % a.H;
        float sum = 0.0f;
        for (int64_t j = 0; j < a.k; ++j) {
            const int row = a.slot_row[t * a.k + j];
            if (row >= 0) sum += a.rows[int64_t(row) * a.H + c];
        }
        static_cast<T*>(a.out)[i] = from_f32<T>(sum);
    }
}

// One thread per (e, c), grid-stride: expert e's rows in order. TS: the source's element type.
template <class TS, class T>
__global__ void __launch_bounds__(256) column_sum_kernel(const __grid_constant__ ColumnSumArgs a) {
    const int64_t n = a.E * a.L;
    const TS* src = static_cast<const TS*>(a.src.data);
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t e = i / a.L, c = i % a.L;
        const int start = a.expert_row_start[e], count = a.expert_count[e];
        float sum = 0.0f;
        for (int r = start; r < start + count; ++r) {
            const float v = to_f32(src[operand_offset(a.src, r) + c]);
            sum += a.src.row_scale ? v * a.src.row_scale[r] : v;
        }
        static_cast<T*>(a.out)[i] = from_f32<T>(sum);
    }
}

}  // namespace moex::cuda::backward
