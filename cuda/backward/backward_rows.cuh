// The backward's row-wise kernels: the gate and its derivative per slot (libm, in the CPU backward's formulas), the
// per-token gather-sum of dx in slot order and the per-expert column sums of the bias gradients in row order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/backward/backward_kernels.h"
#include "cuda/backward/operand.cuh"
#include "cuda/common/numeric.cuh"

namespace moex::cuda::backward {

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

// Four consecutive values at p (16-byte aligned when kVec), or the ones below n one by one (the rest 0).
template <bool kVec>
__device__ __forceinline__ float4 load4(const float* p, int64_t n) {
    if constexpr (kVec) {
        return *reinterpret_cast<const float4*>(p);
    } else {
        return make_float4(n > 0 ? p[0] : 0.f, n > 1 ? p[1] : 0.f, n > 2 ? p[2] : 0.f, n > 3 ? p[3] : 0.f);
    }
}
template <bool kVec>
__device__ __forceinline__ void store4(float* p, int64_t n, const float (&v)[4]) {
    if constexpr (kVec) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
        for (int j = 0; j < 4 && j < n; ++j) p[j] = v[j];
    }
}
// Four values in T: one 8-byte store (16-bit T) or 16 bytes (f32) when kVec.
template <class T, bool kVec>
__device__ __forceinline__ void store4_as(T* p, int64_t n, const float (&v)[4]) {
    if constexpr (kVec && sizeof(T) == 2) {
        struct alignas(8) Quad {
            T q[4];
        } quad{{from_f32<T>(v[0]), from_f32<T>(v[1]), from_f32<T>(v[2]), from_f32<T>(v[3])}};
        *reinterpret_cast<Quad*>(p) = quad;
    } else if constexpr (kVec) {
        store4<true>(reinterpret_cast<float*>(p), 4, v);
    } else {
        for (int j = 0; j < 4 && j < n; ++j) p[j] = from_f32<T>(v[j]);
    }
}
// Four values of type T at p as floats: one 8-byte (16-bit T) or 16-byte (f32) load when kVec, else the ones below n.
template <class T, bool kVec>
__device__ __forceinline__ float4 load4_as(const T* p, int64_t n) {
    if constexpr (kVec && sizeof(T) == 2) {
        struct alignas(8) Quad {
            T q[4];
        } quad = *reinterpret_cast<const Quad*>(p);
        return make_float4(to_f32(quad.q[0]), to_f32(quad.q[1]), to_f32(quad.q[2]), to_f32(quad.q[3]));
    } else if constexpr (kVec) {
        return load4<true>(reinterpret_cast<const float*>(p), 4);
    } else {
        return make_float4(n > 0 ? to_f32(p[0]) : 0.f, n > 1 ? to_f32(p[1]) : 0.f, n > 2 ? to_f32(p[2]) : 0.f,
                           n > 3 ? to_f32(p[3]) : 0.f);
    }
}

inline constexpr int kGateWarps = 8;  // warps per CTA, one slot each
inline constexpr int kGateQuads = 4;  // quads (4 consecutive i) a lane loads before it computes and stores any
inline constexpr int kGateSpan = 32 * 4 * kGateQuads;  // i values per pass of a warp

// One warp per slot, grid-stride over slots. A pass loads kGateQuads quads of i per lane (g, u and G of each, 16-byte
// loads when kVec: I % 4 == 0; g and u of TA, f32 or the dtype), then computes and stores them: the loads
// of a pass are all in flight at once (stores to AU / GH may alias the next loads, so the compiler could not hoist them
// itself). Every lane sums its own G·h in a fixed order and the warp adds the 32 partial sums in a fixed tree: the same
// bits every run.
template <class T, class TA, bool kVec>
__global__ void __launch_bounds__(32 * kGateWarps) gate_grad_kernel(const __grid_constant__ GateGradArgs a) {
    const DType w_dtype = a.weights_f32 ? DType::kF32 : a.dtype;
    const int lane = int(threadIdx.x) & 31;
    const int64_t warps = int64_t(gridDim.x) * kGateWarps;
    T* const dA_out = static_cast<T*>(a.dA_out);
    T* const wh_out = static_cast<T*>(a.wh_out);
    for (int64_t s = int64_t(blockIdx.x) * kGateWarps + threadIdx.x / 32; s < a.S; s += warps) {
        const int row = a.slot_row[s];
        if (row < 0) {  // sentinel: no row, and exactly 0 for its weight
            if (a.grad_weights && lane == 0) store_as(a.grad_weights, s, w_dtype, 0.0f);
            continue;
        }
        const float w = load_weight(a.weights, a.weights_f32, a.dtype, s);
        const TA* au = static_cast<const TA*>(a.AU) + int64_t(a.au_row != nullptr ? a.au_row[s] : row) * a.N;
        const float* gh = a.GH + int64_t(row) * a.I;
        float dot = 0.0f;
        for (int64_t base = 0; base < a.I; base += kGateSpan) {
            float4 g[kGateQuads], u[kGateQuads], G[kGateQuads];
#pragma unroll
            for (int q = 0; q < kGateQuads; ++q) {
                const int64_t i0 = base + 4 * (lane + 32 * q), n = a.I - i0;
                if (n <= 0) continue;
                G[q] = load4<kVec>(gh + i0, n);
                if (!a.has_gate) {
                    u[q] = load4_as<TA, kVec>(au + i0, n), g[q] = u[q];  // g unused
                } else if (a.gate.concatenated) {
                    g[q] = load4_as<TA, kVec>(au + i0, n), u[q] = load4_as<TA, kVec>(au + a.I + i0, n);
                } else {  // interleaved: (g, u) pairs of i0 .. i0 + 3 in 8 consecutive values
                    const float4 lo = load4_as<TA, kVec>(au + 2 * i0, 2 * n),
                                 hi = load4_as<TA, kVec>(au + 2 * i0 + 4, 2 * n - 4);
                    g[q] = make_float4(lo.x, lo.z, hi.x, hi.z), u[q] = make_float4(lo.y, lo.w, hi.y, hi.w);
                }
            }
#pragma unroll
            for (int q = 0; q < kGateQuads; ++q) {
                const int64_t i0 = base + 4 * (lane + 32 * q), n = a.I - i0;
                if (n <= 0) continue;
                const float gv[4] = {g[q].x, g[q].y, g[q].z, g[q].w}, uv[4] = {u[q].x, u[q].y, u[q].z, u[q].w};
                const float Gv[4] = {G[q].x, G[q].y, G[q].z, G[q].w};
                float h[4], dAg[4], dAu[4], wh[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    float dg, du;
                    gate_pair(a.gate, a.has_gate, gv[j], uv[j], h[j], dg, du);
                    h[j] = round_to_dtype(h[j], a.dtype);
                    const float dh = w * Gv[j];
                    if (j < n) dot += Gv[j] * h[j];
                    dAg[j] = dh * dg, dAu[j] = dh * du, wh[j] = w * h[j];
                }
                if (a.h_f32) store4<kVec>(a.h_f32 + int64_t(row) * a.I + i0, n, h);
                if (wh_out) store4_as<T, kVec>(wh_out + int64_t(row) * a.I + i0, n, wh);
                const auto put = [&](auto* dst, const int64_t ld) {  // dA of these quads into a row of ld values
                    using D = std::remove_pointer_t<decltype(dst)>;
                    D* r = dst + int64_t(row) * ld;
                    if (!a.has_gate) {
                        store4_as<D, kVec>(r + i0, n, dAu);
                    } else if (a.gate.concatenated) {
                        store4_as<D, kVec>(r + i0, n, dAg), store4_as<D, kVec>(r + a.I + i0, n, dAu);
                    } else {
                        const float lo[4] = {dAg[0], dAu[0], dAg[1], dAu[1]}, hi[4] = {dAg[2], dAu[2], dAg[3], dAu[3]};
                        store4_as<D, kVec>(r + 2 * i0, 2 * n, lo), store4_as<D, kVec>(r + 2 * i0 + 4, 2 * n - 4, hi);
                    }
                };
                if (a.dA_f32) put(a.dA_f32, a.N);
                if (dA_out) put(dA_out, a.N);
            }
        }
        if (a.down_bias) {
            const int e = load_expert(a.ids, a.ids_i64, s, a.E);  // in [0, E): the slot has a row
            const T* bd = static_cast<const T*>(a.down_bias) + int64_t(e) * a.H;
            const T* dO = static_cast<const T*>(a.dout) + (s / a.k) * a.H;
            for (int64_t c = lane; c < a.H; c += 32) dot += to_f32(dO[c]) * to_f32(bd[c]);
        }
#pragma unroll
        for (int d = 16; d > 0; d >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, d);
        if (lane == 0) {
            a.row_w[row] = w;
            if (a.grad_weights) store_as(a.grad_weights, s, w_dtype, dot);
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

// One thread per (t, four consecutive c), grid-stride: the k slots' rows (TR: f32 or the dtype) summed in f32 in slot
// order, sentinels skipped.
template <class T, class TR, bool kVec>
__global__ void __launch_bounds__(256) token_sum_kernel(const __grid_constant__ TokenSumArgs a) {
    const int64_t quads = (a.H + 3) / 4, n = a.T * quads;
    const TR* rows = static_cast<const TR*>(a.rows);
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = i / quads, c = 4 * (i % quads), left = a.H - c;
        float sum[4] = {0.f, 0.f, 0.f, 0.f};
        for (int64_t j = 0; j < a.k; ++j) {
            const int row = a.slot_row[t * a.k + j];
            if (row < 0) continue;
            const float4 v = load4_as<TR, kVec>(rows + int64_t(row) * a.H + c, left);
            sum[0] += v.x, sum[1] += v.y, sum[2] += v.z, sum[3] += v.w;
        }
        store4_as<T, kVec>(static_cast<T*>(a.out) + t * a.H + c, left, sum);
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
