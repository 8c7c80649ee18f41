// Launcher of the combine kernel (combine.cuh), one instantiation per activation dtype, row type and vector width.
#include <type_traits>

#include "cuda/common/align.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/experts/combine.cuh"

namespace moex::cuda {
namespace {

template <class T, class Y, int V>
void launch_width(const CombineArgs& a, cudaStream_t stream) {
    const dim3 grid(unsigned(a.T), unsigned(ceil_div(a.H, 256 * V)));
    combine::combine_kernel<T, Y, V><<<grid, 256, 0, stream>>>(a);
    MOEX_LAUNCH_CHECK();
}

template <class T, class Y>
void combine_rows(const CombineArgs& a, cudaStream_t stream) {
    constexpr int kWide = 16 / int(sizeof(Y));  // columns of one 16-byte load
    if (a.H % kWide == 0 && is_aligned(a.Y, 16)) return launch_width<T, Y, kWide>(a, stream);
    if constexpr (kWide != 4) {
        if (a.H % 4 == 0 && is_aligned(a.Y, 4 * sizeof(Y))) return launch_width<T, Y, 4>(a, stream);
    }
    launch_width<T, Y, 1>(a, stream);
}

template <class T>
void combine_typed(const CombineArgs& a, cudaStream_t stream) {
    MOEX_REQUIRE(a.T < (int64_t(1) << 31), ErrorCode::kUnsupported, "combine: T >= 2^31");
    if constexpr (std::is_same_v<T, float>) {
        MOEX_REQUIRE(a.y_f32, ErrorCode::kInvalidArgument, "combine: float32 activations take float32 rows");
        combine_rows<T, float>(a, stream);
    } else {
        a.y_f32 ? combine_rows<T, float>(a, stream) : combine_rows<T, T>(a, stream);
    }
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
