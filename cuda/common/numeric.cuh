// Device numerics shared by every experts kernel: bf16/f16/f32 loads and stores through float, the activations
// (silu, gelu erf, gelu tanh, relu) and the gates (act(g)*u, gpt-oss clamped SwiGLU), all evaluated in fp32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/params.h"

namespace moex::cuda {

template <class T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) {
    return v;
}
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) {
    return __half2float(v);
}

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
    return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
    return __float2half_rn(v);
}

// Element i of a tensor of type T given as void*, as float (weights may be f32 or the activation dtype).
template <class T>
__device__ __forceinline__ float load_f32(const void* p, int64_t i) {
    return to_f32(static_cast<const T*>(p)[i]);
}

__device__ __forceinline__ float load_weight(const void* w, bool weights_f32, DType dtype, int64_t i) {
    if (weights_f32 || dtype == DType::kF32) return static_cast<const float*>(w)[i];
    if (dtype == DType::kBF16) return load_f32<__nv_bfloat16>(w, i);
    return load_f32<__half>(w, i);
}

// An expert id read from (T, k) ids; -1 when outside [0, E) (a sentinel: contributes zero, never an index).
__device__ __forceinline__ int load_expert(const void* ids, bool ids_i64, int64_t s, int64_t E) {
    const int64_t e = ids_i64 ? static_cast<const int64_t*>(ids)[s] : int64_t(static_cast<const int32_t*>(ids)[s]);
    return (e >= 0 && e < E) ? int(e) : -1;
}

// libm expf / erff / tanhf: these row-wise kernels are not arithmetic-bound. The sm_90a GEMM epilogue evaluates the
// same functions with MUFU approximations (gate_value in cuda/gemm/sm90_epilogue.cuh), a few ulp apart in f32.
__device__ __forceinline__ float apply_act(Activation act, float x) {
    switch (act) {
        case Activation::kSilu: return x / (1.0f + expf(-x));
        case Activation::kGelu: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
        case Activation::kGeluTanh: {
            const float c = 0.79788456080286536f;  // sqrt(2/pi)
            return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
        }
        case Activation::kRelu: break;
    }
    return x > 0.0f ? x : 0.0f;
}

// gate(g, u): the default is act(g) * u; gpt-oss: g = min(g, l), u = clamp(u, -l, l), (u + 1) * g * sigmoid(a g).
__device__ __forceinline__ float apply_gate(const GateParams& p, float g, float u) {
    if (p.kind == GateKind::kGptOss) {
        g = fminf(g, p.limit);
        u = fminf(fmaxf(u, -p.limit), p.limit);
        const float glu = g / (1.0f + expf(-p.alpha * g));
        return (u + 1.0f) * glu;
    }
    return apply_act(p.activation, g) * u;
}

}  // namespace moex::cuda
