// Launcher of the combine kernel (combine.cuh), one instantiation per activation dtype and vector width.
#include "cuda/common/align.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/experts/combine.cuh"

namespace moex::cuda {
namespace {

template <class T>
void combine_typed(const CombineArgs& a, cudaStream_t stream) {
    MOEX_REQUIRE(a.T < (int64_t(1) << 31), ErrorCode::kUnsupported, "combine: T >= 2^31");
    if (a.H % 4 == 0 && is_aligned16(a.Y)) {
        const dim3 grid(unsigned(a.T), unsigned(ceil_div(a.H, 256 * 4)));
        combine::combine_kernel<T, 4><<<grid, 256, 0, stream>>>(a);
    } else {
        const dim3 grid(unsigned(a.T), unsigned(ceil_div(a.H, 256)));
        combine::combine_kernel<T, 1><<<grid, 256, 0, stream>>>(a);
    }
    MOEX_LAUNCH_CHECK();
}

}  // namespace

void launch_combine(const CombineArgs& a, cudaStream_t stream) {
    if (a.T == 0) return;
    switch (a.dtype) {
        case DType::kBF16: return combine_typed<__nv_bfloat16>(a, stream);
        case DType::kF16: return combine_typed<__half>(a, stream);
        case DType::kF32: return combine_typed<float>(a, stream);
        default: fail(ErrorCode::kInvalidArgument, "combine: activations must be bf16, f16 or f32");
    }
}

}  // namespace moex::cuda
