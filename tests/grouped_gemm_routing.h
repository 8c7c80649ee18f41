// The routing arrays of a grouped GEMM (cuda/gemm/grouped_gemm.h) made by hand, on the device: for the tests that
// launch the GEMM kernels directly on experts laid out in 128-row blocks.
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

   private:
    static DeviceTensor upload(const std::vector<int32_t>& v) {
        Tensor t(DType::kI32, {static_cast<int64_t>(v.size())});
        std::memcpy(t.data(), v.data(), v.size() * sizeof(int32_t));
        return DeviceTensor::from_host(t.view(), Device::kCUDA);
    }

    int64_t tiles_, experts_;
    DeviceTensor tile_expert_, num_tiles_, row_start_, row_count_;
};

}  // namespace moex::test
#endif
