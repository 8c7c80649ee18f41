// launch_attention: picks the kernel (choose_attention_kernel) and, for the prefill kernels, writes the new K/V rows
// into the cache first; the decode kernel writes them itself.
#include "cuda/common/check.h"
#include "cuda/model/context.h"
#include "cuda/model/internal.h"

namespace moex::cuda::model {

void launch_attention(Context& ctx, const AttentionArgs& a) {
    if (a.T == 0) return;
    MOEX_REQUIRE(a.nkv > 0 && a.nq % a.nkv == 0 && a.D > 0, ErrorCode::kInvalidArgument,
                 "attention: num_heads must be a multiple of num_kv_heads");
    MOEX_REQUIRE(a.pos0 >= 0 && a.pos0 + a.T <= a.max_len, ErrorCode::kInvalidArgument,
                 "attention: rows [pos0, pos0 + T) exceed the KV cache");
    MOEX_REQUIRE(a.dtype == DType::kBF16 || a.dtype == DType::kF32, ErrorCode::kUnsupported,
                 "attention: activations must be bf16 or f32");
    const AttentionKernel kernel = choose_attention_kernel(a);
    if (kernel == AttentionKernel::kDecode) return launch_attention_decode(ctx, a);
    MOEX_REQUIRE(a.pos_device == nullptr, ErrorCode::kUnsupported,
                 "attention: a position in device memory needs the decode kernel (T * num_heads / num_kv_heads <= 16, "
                 "head_dim 64, 128 or 256, 16-byte aligned rows)");
    cudaStream_t stream = ctx.impl().stream;
    launch_kv_write({a.k, a.v, a.k_cache, a.v_cache, a.T, a.pos0, a.nkv * a.D, a.ld_k, a.ld_v, a.dtype}, stream);
    if (kernel == AttentionKernel::kFlash) return launch_attention_flash(a, stream);
    launch_attention_generic(a, stream);
}

}  // namespace moex::cuda::model
