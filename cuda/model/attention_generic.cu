// Launcher of the fallback attention kernel (attention_generic.cuh).
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/model/attention_generic.cuh"
#include "cuda/model/internal.h"

namespace moex::cuda::model {

void launch_attention_generic(const AttentionArgs& a, cudaStream_t stream) {
    MOEX_REQUIRE(a.D >= 1 && a.D <= generic::kMaxD, ErrorCode::kUnsupported, "attention: head_dim must be in [1, 256]");
    generic::GenericParams p{};
    p.q = a.q, p.k_cache = a.k_cache, p.v_cache = a.v_cache, p.out = a.out;
    p.ld_q = a.ld_q, p.ld_cache = a.nkv * a.D, p.ld_out = a.ld_out, p.T = a.T, p.pos0 = a.pos0, p.window = a.window;
    p.nq = a.nq, p.D = int32_t(a.D), p.G = int32_t(a.nq / a.nkv), p.scale_log2 = a.scale * 1.4426950408889634f;
    const int64_t blocks = ceil_div(a.T * a.nq, generic::kWarps);
    const size_t smem = size_t(generic::kWarps) * size_t(a.D) * sizeof(float);
    if (a.dtype == DType::kBF16) {
        generic::attention_generic_kernel<__nv_bfloat16><<<unsigned(blocks), generic::kWarps * 32, smem, stream>>>(p);
    } else {
        generic::attention_generic_kernel<float><<<unsigned(blocks), generic::kWarps * 32, smem, stream>>>(p);
    }
    MOEX_LAUNCH_CHECK();
}

}  // namespace moex::cuda::model
