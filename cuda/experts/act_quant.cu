// The activation-quantization kernel (act_quant.h): one warp per (row, group); dynamic groups take their amax with
// a warp reduction, then every value is divided by the group's scale and rounded to e4m3; the code is stored (codes
// mode) or multiplied back in f32 (the same f32 operations as src/cpu/act_quant.cpp) and stored.
#include <algorithm>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/numeric.cuh"
#include "cuda/common/quant.cuh"
#include "cuda/experts/act_quant.h"

namespace moex::cuda {
namespace {

constexpr int kWarps = 8;

template <class T>
__global__ void __launch_bounds__(32 * kWarps) act_quant_kernel(const __grid_constant__ ActQuantArgs a) {
    asm volatile("griddepcontrol.wait;" ::: "memory");  // PDL (the decode chain): the previous kernel's results
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const int64_t groups = a.K / a.group;
    const int64_t item = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (item >= a.rows * groups) return;
    const int64_t r = item / groups, k0 = (item % groups) * a.group;
    const T* src = static_cast<const T*>(a.src) + (r / a.src_div) * a.K + k0;
    T* dst = static_cast<T*>(a.dst) + r * a.K + k0;
    uint8_t* dst8 = static_cast<uint8_t*>(a.dst) + r * a.K + k0;  // dst_e4m3
    // The row's expert: slot rows from ids, padded rows from their tile; rows of no expert (sentinel slots, tiles
    // past the routing's count) are left as they are, with scale 0 in codes mode (they are never read).
    int e = 0;
    if (a.ids != nullptr) {
        e = load_expert(a.ids, a.ids_i64, r, a.E);
    } else if (a.tile_expert != nullptr) {
        e = r / a.tile_rows < *a.num_tiles ? a.tile_expert[r / a.tile_rows] : -1;
        e = e >= 0 && e < a.E ? e : -1;
    }
    // Also an all-zero group (padding rows, zero inputs): it stays zero, codes 0 with scale 0.
    auto keep = [&] {
        if (a.dst_e4m3)
            for (int64_t k = lane; k < a.group; k += 32) dst8[k] = 0;
        else if (dst != src)
            for (int64_t k = lane; k < a.group; k += 32) dst[k] = src[k];
        if (a.scale_out != nullptr && lane == 0) a.scale_out[item] = 0.0f;
    };
    if (e < 0) return keep();
    float s;
    if (a.static_scale != nullptr) {
        s = a.static_scale[e];
    } else {
        float amax = 0.0f;
        for (int64_t k = lane; k < a.group; k += 32) amax = fmaxf(amax, fabsf(to_f32(src[k])));
#pragma unroll
        for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        if (amax == 0.0f) return keep();  // the division below would give NaN
        s = __fdiv_rn(amax, 448.0f);
    }
    for (int64_t k = lane; k < a.group; k += 32) {
        const uint8_t code = f32_to_e4m3(__fdiv_rn(to_f32(src[k]), s));
        if (a.dst_e4m3) {
            dst8[k] = code;
        } else {
            const float q = e4m3_to_f32(code);
            dst[k] = from_f32<T>(a.scale_out != nullptr ? q : __fmul_rn(q, s));
        }
    }
    if (a.scale_out != nullptr && lane == 0) a.scale_out[item] = s;
}

template <class T>
void act_quant_typed(const ActQuantArgs& a, cudaStream_t stream) {
    const int64_t groups = a.K / a.group;
    const int64_t blocks = ceil_div(a.rows * groups, int64_t(kWarps));
    MOEX_REQUIRE(blocks < (int64_t(1) << 31), ErrorCode::kUnsupported, "activation quantization: too many rows");
    if (!pdl_enabled()) {
        act_quant_kernel<T><<<unsigned(blocks), 32 * kWarps, 0, stream>>>(a);
        MOEX_LAUNCH_CHECK();
        return;
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(blocks)), cfg.blockDim = dim3(32 * kWarps), cfg.stream = stream;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr, cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, act_quant_kernel<T>, a));
}

// Gather + dynamic quantization, groups of 128: one warp per (row, group), lane l holding values 4l .. 4l + 3 (one
// 8- or 16-byte load), one pass, the four codes stored as one word. The same f32 operations as act_quant_kernel.
template <class T>
__global__ void __launch_bounds__(32 * kWarps) gather_act_quant_kernel(const __grid_constant__ GatherQuantArgs a) {
    const GatherArgs& g = a.gather;
    const int64_t groups = g.H / 128, total = *g.total_rows;
    const int64_t lane = threadIdx.x % 32, items = total * groups;
    const int64_t stride = int64_t(gridDim.x) * kWarps;
    for (int64_t item = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; item < items; item += stride) {
        const int64_t r = item / groups, k0 = (item % groups) * 128 + 4 * lane;
        const int s = g.row_slot[r];
        float v[4] = {0.f, 0.f, 0.f, 0.f};
        if (s >= 0) {
            const T* src = static_cast<const T*>(g.x) + int64_t(s / g.k) * g.H + k0;
            if constexpr (sizeof(T) == 4) {
                const float4 w = __ldg(reinterpret_cast<const float4*>(src));
                v[0] = w.x, v[1] = w.y, v[2] = w.z, v[3] = w.w;
            } else {
                const uint2 w = __ldg(reinterpret_cast<const uint2*>(src));
                const T* h = reinterpret_cast<const T*>(&w);
#pragma unroll
                for (int i = 0; i < 4; ++i) v[i] = to_f32(h[i]);
            }
        }
        float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
        for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        // An all-zero group (padding rows, zero inputs) stays zero, codes 0 with scale 0 (the division would be NaN).
        const float sc = amax == 0.0f ? 0.0f : __fdiv_rn(amax, 448.0f);
        uint32_t word = 0;
        if (amax != 0.0f) {
#pragma unroll
            for (int i = 0; i < 4; ++i) word |= uint32_t(f32_to_e4m3(__fdiv_rn(v[i], sc))) << (8 * i);
        }
        *reinterpret_cast<uint32_t*>(a.dst + r * g.H + k0) = word;
        if (lane == 0) {
            a.scale_out[item] = sc;
            if (item % groups == 0 && g.row_scale != nullptr)
                g.row_scale[r] = s >= 0 ? load_weight(g.topk_weights, g.weights_f32, g.dtype, s) : 0.0f;
        }
    }
}

}  // namespace

bool gather_act_quant_takes(const GatherArgs& g, int64_t group, bool static_scales) {
    const int64_t esize = dtype_size(g.dtype);
    return !static_scales && group == 128 && g.H % 128 == 0 && (esize == 2 || esize == 4) &&
           reinterpret_cast<uintptr_t>(g.x) % (4 * esize) == 0;
}

void launch_gather_act_quant(const GatherQuantArgs& a, cudaStream_t stream) {
    const GatherArgs& g = a.gather;
    MOEX_REQUIRE(gather_act_quant_takes(g, 128, false), ErrorCode::kInvalidArgument,
                 "gather + activation quantization: needs groups of 128 and aligned rows (gather_act_quant_takes)");
    if (g.rows_bound == 0) return;
    const int64_t items = g.rows_bound * (g.H / 128);
    const int64_t max_blocks = int64_t(device_state().sm_count) * 16;
    const unsigned blocks = unsigned(std::max<int64_t>(1, std::min(ceil_div(items, int64_t(kWarps)), max_blocks)));
    switch (g.dtype) {
        case DType::kBF16: gather_act_quant_kernel<__nv_bfloat16><<<blocks, 32 * kWarps, 0, stream>>>(a); break;
        case DType::kF16: gather_act_quant_kernel<__half><<<blocks, 32 * kWarps, 0, stream>>>(a); break;
        case DType::kF32: gather_act_quant_kernel<float><<<blocks, 32 * kWarps, 0, stream>>>(a); break;
        default: fail(ErrorCode::kInvalidArgument, "gather + activation quantization: bf16, f16 or f32 activations");
    }
    MOEX_LAUNCH_CHECK();
}

void launch_act_quant(const ActQuantArgs& a, cudaStream_t stream) {
    if (a.rows == 0) return;
    MOEX_REQUIRE(a.group > 0 && a.K % a.group == 0, ErrorCode::kInvalidArgument,
                 "activation quantization: the group must divide K");
    switch (a.dtype) {
        case DType::kBF16: return act_quant_typed<__nv_bfloat16>(a, stream);
        case DType::kF16: return act_quant_typed<__half>(a, stream);
        case DType::kF32: return act_quant_typed<float>(a, stream);
        default: fail(ErrorCode::kInvalidArgument, "activation quantization: activations must be bf16, f16 or f32");
    }
}

}  // namespace moex::cuda
