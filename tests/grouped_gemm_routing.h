// The routing arrays of a grouped GEMM (cuda/gemm/grouped_gemm.h) made by hand, on the device, and the arguments the
// tests that launch the GEMM kernels directly on experts laid out in 128-row blocks set alike.
#pragma once

#if MOEX_WITH_CUDA
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/gemm/grouped_gemm.h"
#include "moex/device.h"
#include "moex/tensor.h"

namespace moex::test {

// Tile t belongs to expert tile_experts[t] (any value: an out-of-range one must store nothing); expert e's block starts
// at row starts[e] (E + 1 entries) and holds counts[e] real rows. into() points a GroupedGemmArgs' four routing
// pointers at the uploaded arrays, which live as long as this object, and sets E and the tile bound from them.
class GemmRouting {
   public:
    GemmRouting(const std::vector<int32_t>& tile_experts, const std::vector<int32_t>& starts,
                const std::vector<int32_t>& counts)
        : tiles_(static_cast<int64_t>(tile_experts.size())),
          experts_(static_cast<int64_t>(counts.size())),
          tile_expert_(upload(tile_experts)),
          num_tiles_(upload({static_cast<int32_t>(tile_experts.size())})),
          row_start_(upload(starts)),
          row_count_(upload(counts)) {}

    void into(cuda::GroupedGemmArgs& a) const {
        a.m_tile_expert = static_cast<const int32_t*>(tile_expert_.view().data);
        a.num_m_tiles = static_cast<const int32_t*>(num_tiles_.view().data);
        a.expert_row_start = static_cast<const int32_t*>(row_start_.view().data);
        a.expert_row_count = static_cast<const int32_t*>(row_count_.view().data);
        a.E = experts_, a.max_m_tiles = tiles_;
    }
    // Rows of A (P, K) times B (E, N, K) of their expert, stored to D as (P, N) f32 rows, routed by this object: A and
    // B as bf16 until the caller sets their quantized kinds (b_dtype, b_scales, a_fp8); the gate is the contract's
    // default and unused by the plain store.
    cuda::GroupedGemmArgs store_f32_args(const void* A, const void* B, void* D, int64_t P, int64_t N, int64_t K) const {
        cuda::GroupedGemmArgs a{};
        a.A = A, a.B = B, a.D = D;
        into(a);
        a.P = P, a.N = N, a.K = K;
        a.dtype = DType::kBF16, a.d_f32 = true, a.epilogue = cuda::Epilogue::kStore;
        a.gate = {Activation::kSilu, GateKind::kDefault, true, 1.702f, 7.0f};
        return a;
    }

   private:
    static DeviceTensor upload(const std::vector<int32_t>& v) {
        Tensor t(DType::kI32, {static_cast<int64_t>(v.size())});
        std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
        return DeviceTensor::from_host(t.view(), Device::kCUDA);
    }

    int64_t tiles_, experts_;
    DeviceTensor tile_expert_, num_tiles_, row_start_, row_count_;
};

// A (P, N) f32 output on the device, every byte 0xff (NaN): a row the kernel should not store stays NaN.
inline DeviceTensor poisoned_f32(int64_t P, int64_t N) {
    const int64_t shape[2] = {P, N};
    DeviceTensor d(DType::kF32, shape, 2, Device::kCUDA);
    d.fill_bytes(0xff);
    return d;
}

}  // namespace moex::test
#endif
