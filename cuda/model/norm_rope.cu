// Launchers of norm_rope.cuh: RMSNorm over row groups, and the fused per-head q/k norm + rotary embedding.
#include <algorithm>

#include "cuda/common/align.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/pdl.cuh"
#include "cuda/model/context.h"
#include "cuda/model/norm_rope.cuh"

namespace moex::cuda::model {
namespace {

template <class T>
void rms_norm_typed(const RmsNormArgs& a, cudaStream_t stream) {
    constexpr int V = kVec16<T>;
    const int64_t es = sizeof(T);
    const bool vec = a.group % V == 0 && is_aligned16(a.x) && is_aligned16(a.w) && is_aligned16(a.out) &&
                     (a.ld_x * es) % 16 == 0 && (a.ld_out * es) % 16 == 0;
    const int per = vec ? V : 1;
    // One CTA per group, one element vector per thread where the group allows (2048 bf16 -> 256 threads).
    const int threads = int(std::clamp<int64_t>(round_up(ceil_div(a.group, per), 32), 32, 512));
    const int64_t groups = a.width / a.group;
    const dim3 grid(unsigned(std::min<int64_t>(groups, 65535)), unsigned(std::min<int64_t>(a.T, 65535)));
    if (vec) {
        launch_pdl(norm::rms_norm_kernel<T, V>, dim3(grid), dim3(threads), 0, stream, a);
    } else {
        launch_pdl(norm::rms_norm_kernel<T, 1>, dim3(grid), dim3(threads), 0, stream, a);
    }
}

template <class T>
void add_rms_norm_typed(const AddRmsNormArgs& a, cudaStream_t stream) {
    constexpr int V = kVec16<T>;
    const int64_t es = sizeof(T);
    const bool vec = a.W % V == 0 && is_aligned16(a.a) && is_aligned16(a.b) && is_aligned16(a.sum) &&
                     is_aligned16(a.w) && is_aligned16(a.out) &&
                     ((a.ld_a | a.ld_b | a.ld_sum | a.ld_out) * es) % 16 == 0;
    const int per = vec ? V : 1;
    const int threads = int(std::clamp<int64_t>(round_up(ceil_div(a.W, per), 32), 32, 512));
    const unsigned grid = unsigned(std::min<int64_t>(a.T, 65535));
    if (vec) {
        launch_pdl(norm::add_rms_norm_kernel<T, V>, dim3(grid), dim3(threads), 0, stream, a);
    } else {
        launch_pdl(norm::add_rms_norm_kernel<T, 1>, dim3(grid), dim3(threads), 0, stream, a);
    }
}

}  // namespace

void launch_add_rms_norm(Context& ctx, const AddRmsNormArgs& a) {
    if (a.T == 0 || a.W == 0) return;
    cudaStream_t stream = ctx.impl().stream;
    if (a.dtype == DType::kBF16) return add_rms_norm_typed<__nv_bfloat16>(a, stream);
    MOEX_REQUIRE(a.dtype == DType::kF32, ErrorCode::kUnsupported, "add + rms_norm: activations must be bf16 or f32");
    add_rms_norm_typed<float>(a, stream);
}

void launch_rms_norm(Context& ctx, const RmsNormArgs& a) {
    if (a.T == 0 || a.width == 0) return;
    MOEX_REQUIRE(a.group > 0 && a.width % a.group == 0, ErrorCode::kInvalidArgument,
                 "rms_norm: the row width is not a multiple of the weight size");
    cudaStream_t stream = ctx.impl().stream;
    if (a.dtype == DType::kBF16) return rms_norm_typed<__nv_bfloat16>(a, stream);
    MOEX_REQUIRE(a.dtype == DType::kF32, ErrorCode::kUnsupported, "rms_norm: activations must be bf16 or f32");
    rms_norm_typed<float>(a, stream);
}

void launch_head_norm_rope(Context& ctx, const HeadNormRopeArgs& a) {
    if (a.T == 0 || a.heads == 0) return;
    MOEX_REQUIRE(a.head_dim > 0 && a.head_dim <= kMaxHeadDim, ErrorCode::kUnsupported,
                 "rope/head norm: head_dim must be in [1, 512]");
    MOEX_REQUIRE(
        a.rotary_dim >= 0 && a.rotary_dim % 2 == 0 && a.rotary_dim <= a.head_dim && a.rotary_dim / 2 <= kMaxRotaryHalf,
        ErrorCode::kUnsupported, "rope: rotary_dim must be even and at most head_dim (and 512)");
    MOEX_REQUIRE(a.num_norms >= 0 && a.num_norms <= 2, ErrorCode::kInvalidArgument, "head norm: at most two ranges");
    norm::HeadNormRopeParams p{};
    p.x = a.x, p.T = a.T, p.heads = a.heads, p.D = a.head_dim, p.ld = a.ld, p.pos0 = a.pos0;
    p.pos_device = a.pos_device;
    p.num_norms = a.num_norms, p.rotary_dim = a.rotary_dim, p.attention_scaling = a.attention_scaling;
    for (int i = 0; i < a.num_norms; ++i) {
        p.norm_w[i] = a.norm_w[i], p.norm_begin[i] = a.norm_begin[i], p.norm_end[i] = a.norm_end[i];
        p.norm_eps[i] = a.norm_eps[i];
    }
    for (int i = 0; i < a.rotary_dim / 2; ++i) p.inv_freq[i] = a.inv_freq[i];
    const int warps = int(std::min<int64_t>(8, a.heads));
    const size_t smem = size_t(a.rotary_dim + int64_t(warps) * a.head_dim) * sizeof(float);
    const dim3 grid(unsigned(ceil_div(a.heads, warps)), unsigned(std::min<int64_t>(a.T, 65535)));
    cudaStream_t stream = ctx.impl().stream;
    if (a.dtype == DType::kBF16) {
        launch_pdl(norm::head_norm_rope_kernel<__nv_bfloat16>, dim3(grid), dim3(32 * warps), smem, stream, p);
    } else {
        MOEX_REQUIRE(a.dtype == DType::kF32, ErrorCode::kUnsupported, "rope: activations must be bf16 or f32");
        launch_pdl(norm::head_norm_rope_kernel<float>, dim3(grid), dim3(32 * warps), smem, stream, p);
    }
}

}  // namespace moex::cuda::model
