// The activation-quantization kernel (act_quant.h): one warp per (row, group); dynamic groups take their amax with
// a warp reduction, then every value is divided by the group's scale and rounded to e4m3; the code is stored (codes
// mode) or multiplied back in f32 (the same f32 operations as src/cpu/act_quant.cpp) and stored.
#include <algorithm>
#include <type_traits>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/quant.cuh"
#include "cuda/experts/act_quant.h"
#include "cuda/routing/gather.cuh"

namespace moex::cuda {
namespace {

constexpr int kWarps = 8;

template <class T>
__global__ void __launch_bounds__(32 * kWarps) act_quant_kernel(const __grid_constant__ ActQuantArgs a) {
    pdl_enter();  // launched by launch_pdl (the decode chain): the previous kernel's results
    const int64_t groups = a.K / a.group;
    const int64_t item = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (item >= a.rows * groups) return;
    const int64_t r = item / groups, k0 = (item % groups) * a.group;
    const T* src = static_cast<const T*>(a.src) + (r / a.src_div) * a.K + k0;
    T* dst = static_cast<T*>(a.dst) + r * a.K + k0;
    uint8_t* dst8 = static_cast<uint8_t*>(a.dst) + r * a.K + k0;  // dst_e4m3
    // The row's expert: slot rows from ids, packed rows through their slot, padded rows from their tile; rows of no
    // expert (sentinel slots, tiles past the routing's count) are left as they are, with scale 0 in codes mode (they
    // are never read).
    int e = 0;
    if (a.row_slot != nullptr) {
        e = r < *a.total_rows ? load_expert(a.ids, a.ids_i64, a.row_slot[r], a.E) : -1;
    } else if (a.ids != nullptr) {
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
    float s, inv = 0.0f;  // static: v / s; dynamic: v * inv (moex/quant.h)
    if (a.static_scale != nullptr) {
        s = a.static_scale[e];
    } else {
        float amax = 0.0f;
        for (int64_t k = lane; k < a.group; k += 32) amax = fmaxf(amax, fabsf(to_f32(src[k])));
#pragma unroll
        for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        if (amax == 0.0f) return keep();  // the inverse below would be infinite
        s = __fdiv_rn(amax, 448.0f), inv = dynamic_inverse(amax);
    }
    for (int64_t k = lane; k < a.group; k += 32) {
        const float v = to_f32(src[k]);
        const uint8_t code = f32_to_e4m3(a.static_scale != nullptr ? __fdiv_rn(v, s) : v * inv);
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
    launch_pdl(act_quant_kernel<T>, dim3(unsigned(blocks)), dim3(32 * kWarps), 0, stream, a);
}

// Eight values of a row at p (16-byte aligned), or zeros when !valid.
template <class T>
__device__ __forceinline__ void load8(float (&v)[8], const T* p, bool valid) {
    if (!valid) {
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = 0.0f;
    } else if constexpr (sizeof(T) == 4) {
        const float4 w0 = __ldg(reinterpret_cast<const float4*>(p)), w1 = __ldg(reinterpret_cast<const float4*>(p) + 1);
        v[0] = w0.x, v[1] = w0.y, v[2] = w0.z, v[3] = w0.w, v[4] = w1.x, v[5] = w1.y, v[6] = w1.z, v[7] = w1.w;
    } else {
        const uint4 w = __ldg(reinterpret_cast<const uint4*>(p));
        const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {  // bit operations on the words: no copy of w in local memory
            const auto bits = static_cast<unsigned short>(words[i / 2] >> (16 * (i % 2)));
            if constexpr (std::is_same_v<T, __nv_bfloat16>)
                v[i] = __uint_as_float(uint32_t(bits) << 16);
            else
                v[i] = __half2float(__ushort_as_half(bits));
        }
    }
}

// Gather + dynamic quantization, groups of 128, token-major: one warp per token quantizes its row once and writes the
// codes and scales to the rows of its k slots (walking the padded rows instead quantized each token k times and read
// its row k times); then the padding rows get codes 0, scale 0 and weight 0. 256 values per step, lane l holding
// values 8 (l % 16) .. + 7 of the step's group 2·step + l / 16 (one 16-byte load, two for f32), so a half-warp holds
// a group and reduces it with four shuffles; kBatch steps' loads are issued before their reductions. The same f32
// operations as act_quant_kernel.
template <class T>
__global__ void __launch_bounds__(32 * kWarps, 2) gather_act_quant_kernel(const __grid_constant__ GatherQuantArgs a) {
    constexpr int kBatch = 4;
    const GatherArgs& g = a.gather;
    const int64_t groups = g.H / 128, steps = (groups + 1) / 2;
    const int lane = threadIdx.x % 32, half = lane / 16, col = 8 * (lane % 16);
    const int64_t warps = int64_t(gridDim.x) * kWarps, warp = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    for (int64_t t = warp; t < g.T; t += warps) {
        const T* src = static_cast<const T*>(g.x) + t * g.H + col;
        for (int64_t j0 = 0; j0 < g.k; j0 += 32) {
            const routing::TokenSlots slots = routing::token_slots(g, t, j0, lane);
            for (int64_t c0 = 0; c0 < steps; c0 += kBatch) {
                float v[kBatch][8];
#pragma unroll
                for (int b = 0; b < kBatch; ++b) {
                    const int64_t grp = 2 * (c0 + b) + half;
                    load8(v[b], src + grp * 128, c0 + b < steps && grp < groups);
                }
                uint2 code[kBatch];
                float sc[kBatch];
#pragma unroll
                for (int b = 0; b < kBatch; ++b) {
                    float amax = 0.0f;
#pragma unroll
                    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[b][i]));
#pragma unroll
                    for (int o = 8; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
                    // An all-zero group (zero inputs) stays zero, codes 0 with scale 0 (the division would be NaN).
                    sc[b] = amax == 0.0f ? 0.0f : __fdiv_rn(amax, 448.0f);
                    uint32_t lo = 0, hi = 0;
                    if (amax != 0.0f) {
                        const float inv = dynamic_inverse(amax);
#pragma unroll
                        for (int i = 0; i < 4; i += 2) {
                            lo |= uint32_t(f32x2_to_e4m3x2(v[b][i] * inv, v[b][i + 1] * inv)) << (8 * i);
                            hi |= uint32_t(f32x2_to_e4m3x2(v[b][i + 4] * inv, v[b][i + 5] * inv)) << (8 * i);
                        }
                    }
                    code[b] = make_uint2(lo, hi);
                }
                for (int j = 0; j < slots.nrows; ++j) {
                    const int r = __shfl_sync(0xffffffffu, slots.row, j);
                    if (r < 0) continue;
#pragma unroll
                    for (int b = 0; b < kBatch; ++b) {
                        const int64_t grp = 2 * (c0 + b) + half;
                        if (c0 + b < steps && grp < groups) {
                            *reinterpret_cast<uint2*>(a.dst + int64_t(r) * g.H + grp * 128 + col) = code[b];
                            if (lane % 16 == 0) a.scale_out[int64_t(r) * groups + grp] = sc[b];
                        }
                    }
                }
            }
            routing::set_row_weight(g, slots);
        }
    }
    routing::clear_padding_rows(g, warp, warps, lane, [&](int64_t p) {
        for (int64_t i = lane; i < g.H / 16; i += 32) reinterpret_cast<uint4*>(a.dst + p * g.H)[i] = uint4{};
        for (int64_t i = lane; i < groups; i += 32) a.scale_out[p * groups + i] = 0.0f;
    });
}

// One resident wave of blocks (the kernel strides over the tokens and rows), never more than the warps they need.
template <class T>
void launch_gather_act_quant_as(const GatherQuantArgs& a, int64_t warps_needed, cudaStream_t stream) {
    static const int per_sm = [] {
        int n = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, gather_act_quant_kernel<T>, 32 * kWarps, 0));
        return std::max(n, 1);
    }();
    const int64_t wave = int64_t(device_state().sm_count) * per_sm;
    const auto blocks = unsigned(std::max<int64_t>(1, std::min(ceil_div(warps_needed, int64_t(kWarps)), wave)));
    gather_act_quant_kernel<T><<<blocks, 32 * kWarps, 0, stream>>>(a);
    MOEX_LAUNCH_CHECK();
}

}  // namespace

bool gather_act_quant_takes(const GatherArgs& g, int64_t group, bool static_scales) {
    const int64_t esize = dtype_size(g.dtype);
    return !static_scales && group == 128 && g.H % 128 == 0 && (esize == 2 || esize == 4) &&
           reinterpret_cast<uintptr_t>(g.x) % 16 == 0;
}

void launch_gather_act_quant(const GatherQuantArgs& a, cudaStream_t stream) {
    const GatherArgs& g = a.gather;
    MOEX_REQUIRE(gather_act_quant_takes(g, 128, false), ErrorCode::kInvalidArgument,
                 "gather + activation quantization: needs groups of 128 and aligned rows (gather_act_quant_takes)");
    const int64_t warps = gather_warps(g, "gather + activation quantization");
    if (g.rows_bound == 0) return;
    switch (g.dtype) {
        case DType::kBF16: return launch_gather_act_quant_as<__nv_bfloat16>(a, warps, stream);
        case DType::kF16: return launch_gather_act_quant_as<__half>(a, warps, stream);
        case DType::kF32: return launch_gather_act_quant_as<float>(a, warps, stream);
        default: fail(ErrorCode::kInvalidArgument, "gather + activation quantization: bf16, f16 or f32 activations");
    }
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
