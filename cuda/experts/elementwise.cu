// Launchers of the hidden-activation and combine kernels (elementwise.cuh), one instantiation per dtype.
#include <algorithm>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/experts/elementwise.cuh"

namespace moex::cuda {
namespace {

template <class T>
void hidden_act_typed(const HiddenActArgs& a, cudaStream_t stream) {
    const int64_t blocks =
        std::max<int64_t>(1, std::min<int64_t>(a.rows_bound, int64_t(current_device_info().sm_count) * 16));
    elementwise::hidden_act_kernel<T><<<unsigned(blocks), 256, 0, stream>>>(a);
    MOEX_LAUNCH_CHECK();
}

template <class T>
void combine_typed(const CombineArgs& a, cudaStream_t stream) {
    MOEX_REQUIRE(a.T < (int64_t(1) << 31), ErrorCode::kUnsupported, "combine: T >= 2^31");
    if (a.H % 4 == 0 && reinterpret_cast<uintptr_t>(a.Y) % 16 == 0) {
        const dim3 grid(unsigned(a.T), unsigned(ceil_div(a.H, 256 * 4)));
        elementwise::combine_kernel<T, 4><<<grid, 256, 0, stream>>>(a);
    } else {
        const dim3 grid(unsigned(a.T), unsigned(ceil_div(a.H, 256)));
        elementwise::combine_kernel<T, 1><<<grid, 256, 0, stream>>>(a);
    }
    MOEX_LAUNCH_CHECK();
}

}  // namespace

void launch_hidden_act(const HiddenActArgs& a, cudaStream_t stream) {
    if (a.rows_bound == 0) return;
    switch (a.dtype) {
        case ActDType::kBF16:
            return hidden_act_typed<__nv_bfloat16>(a, stream);
        case ActDType::kF16:
            return hidden_act_typed<__half>(a, stream);
        case ActDType::kF32:
            return hidden_act_typed<float>(a, stream);
    }
}

void launch_combine(const CombineArgs& a, cudaStream_t stream) {
    if (a.T == 0) return;
    switch (a.dtype) {
        case ActDType::kBF16:
            return combine_typed<__nv_bfloat16>(a, stream);
        case ActDType::kF16:
            return combine_typed<__half>(a, stream);
        case ActDType::kF32:
            return combine_typed<float>(a, stream);
    }
}

}  // namespace moex::cuda
