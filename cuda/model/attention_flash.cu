// Launcher of the bf16 head_dim-128 flash attention kernel (attention_flash.cuh).
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/model/attention_flash.cuh"
#include "cuda/model/internal.h"

namespace moex::cuda::model {

void launch_attention_flash(const AttentionArgs& a, cudaStream_t stream) {
    MOEX_REQUIRE(a.dtype == DType::kBF16 && a.D == flash::kD, ErrorCode::kInvalidArgument,
                 "flash attention: bf16 with head_dim 128 only");
    flash::FlashParams p{};
    p.q = static_cast<const __nv_bfloat16*>(a.q);
    p.k_cache = static_cast<const __nv_bfloat16*>(a.k_cache);
    p.v_cache = static_cast<const __nv_bfloat16*>(a.v_cache);
    p.out = static_cast<__nv_bfloat16*>(a.out);
    p.ld_q = a.ld_q, p.ld_cache = a.nkv * a.D, p.ld_out = a.ld_out, p.T = a.T, p.pos0 = a.pos0, p.window = a.window;
    p.G = int32_t(a.nq / a.nkv), p.n_qtiles = int32_t(ceil_div(a.T, flash::kBr));
    p.scale_log2 = a.scale * 1.4426950408889634f;
    MOEX_REQUIRE(p.n_qtiles <= 65535, ErrorCode::kUnsupported, "flash attention: more than 4M query rows");
    allow_dynamic_smem(flash::attention_flash_kernel, flash::kSmemBytes);
    const dim3 grid(unsigned(a.nq), unsigned(p.n_qtiles));
    flash::attention_flash_kernel<<<grid, flash::kThreads, flash::kSmemBytes, stream>>>(p);
    MOEX_LAUNCH_CHECK();
}

}  // namespace moex::cuda::model
