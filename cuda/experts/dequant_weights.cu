// The weight dequantizer of dequant_weights.h: one grid row per expert, 16-byte bf16 stores of eight weights each.
#include <cuda_bf16.h>

#include <algorithm>

#include "cuda/common/align.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/quant.cuh"
#include "cuda/experts/dequant_weights.h"

namespace moex::cuda {
namespace {

template <class Id>
__global__ void mark_experts_kernel(const Id* ids, int64_t S, int64_t E, int32_t* hit) {
    for (int64_t s = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; s < S; s += int64_t(gridDim.x) * blockDim.x) {
        const int64_t e = static_cast<int64_t>(ids[s]);
        if (e >= 0 && e < E) hit[e] = 1;  // every writer stores the same value
    }
}

__global__ void dequantize_weights_kernel(const DequantWeightsArgs a) {
    const int64_t e = blockIdx.y;
    if (a.hit[e] == 0) return;
    const int64_t per_row = a.C / 8, chunks = a.R * per_row;
    const int64_t row_bytes = quant_row_bytes(a.scales.format, a.C);
    const uint8_t* codes = static_cast<const uint8_t*>(a.codes) + e * a.R * row_bytes;
    uint4* out = static_cast<uint4*>(a.out) + e * chunks;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < chunks; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / per_row, c0 = (i - r * per_row) * 8;
        float v[8];
        dequant8_folded(a.scales, codes + r * row_bytes, e, r, c0, v);
        const float promo = promo_scale(a.scales, e, r, c0);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] *= promo;
        out[i] = pack8<__nv_bfloat16>(v);
    }
}

}  // namespace

void launch_mark_experts(const void* ids, bool ids_i64, int64_t S, int64_t E, int32_t* hit, cudaStream_t stream) {
    CUDA_CHECK(cudaMemsetAsync(hit, 0, size_t(E) * sizeof(int32_t), stream));
    if (S == 0) return;
    const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(S, 256), 1024));
    if (ids_i64)
        mark_experts_kernel<<<blocks, 256, 0, stream>>>(static_cast<const int64_t*>(ids), S, E, hit);
    else
        mark_experts_kernel<<<blocks, 256, 0, stream>>>(static_cast<const int32_t*>(ids), S, E, hit);
    MOEX_LAUNCH_CHECK();
}

void launch_dequantize_weights(const DequantWeightsArgs& a, cudaStream_t stream) {
    MOEX_REQUIRE(a.scales.format != QuantFormat::kNone && a.C % 8 == 0 && a.E > 0 && a.E <= 65535 && a.R > 0,
                 ErrorCode::kInvalidArgument,
                 "dequantize_weights: quantized (E, R, C) weights with C % 8 == 0 and 0 < E <= 65535");
    MOEX_REQUIRE(is_aligned16(a.out), ErrorCode::kInvalidArgument, "dequantize_weights: output not 16-byte aligned");
    const int64_t chunks = a.R * (a.C / 8);
    // Enough blocks per expert to fill the device when few experts are hit (decode), a grid-stride loop past that.
    const int64_t per_expert =
        std::max<int64_t>(1, std::min<int64_t>(ceil_div(chunks, 256), 4 * device_state().sm_count));
    dequantize_weights_kernel<<<dim3(unsigned(per_expert), unsigned(a.E)), 256, 0, stream>>>(a);
    MOEX_LAUNCH_CHECK();
}

}  // namespace moex::cuda
