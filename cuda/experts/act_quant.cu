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

}  // namespace

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
