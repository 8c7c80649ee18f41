// Launcher of the hidden-activation kernel (hidden_act.cuh), one instantiation per activation dtype.
#include <algorithm>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/experts/hidden_act.cuh"

namespace moex::cuda {
namespace {

template <class T>
void hidden_act_typed(const HiddenActArgs& a, cudaStream_t stream) {
    const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(a.rows_bound, int64_t(device_state().sm_count) * 16));
    hidden_act::hidden_act_kernel<T><<<unsigned(blocks), 256, 0, stream>>>(a);
    MOEX_LAUNCH_CHECK();
}

}  // namespace

void launch_hidden_act(const HiddenActArgs& a, cudaStream_t stream) {
    if (a.rows_bound == 0) return;
    switch (a.dtype) {
        case DType::kBF16: return hidden_act_typed<__nv_bfloat16>(a, stream);
        case DType::kF16: return hidden_act_typed<__half>(a, stream);
        case DType::kF32: return hidden_act_typed<float>(a, stream);
        default: fail(ErrorCode::kInvalidArgument, "hidden activation: activations must be bf16, f16 or f32");
    }
}

}  // namespace moex::cuda
