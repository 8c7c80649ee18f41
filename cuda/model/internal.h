// Launchers used only inside cuda/model: the KV-cache write ahead of the prefill attention kernels and the bias
// epilogue of the rare linear that cuBLASLt cannot fuse a bias into.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/model/model_ops.h"

namespace moex::cuda::model {

// k_cache[pos0 + t, :] = k[t, :], v_cache likewise, for t < T; rows are `width` = nkv * D elements.
struct KvWriteArgs {
    const void* k;  // (T, width) row-strided
    const void* v;  // (T, width) row-strided
    void* k_cache;  // (max_len, width)
    void* v_cache;  // (max_len, width)
    int64_t T, pos0, width, ld_k, ld_v;
    DType dtype;
};
void launch_kv_write(const KvWriteArgs& a, cudaStream_t stream);

// out (T, N) = round(y (T, N) f32 + bias (N)).
struct BiasEpilogueArgs {
    const float* y;    // (T, N) contiguous
    const void* bias;  // (N) dtype
    void* out;         // (T, N) row-strided, dtype or f32
    int64_t T, N, ld_out;
    DType dtype;
    bool out_f32;
};
void launch_bias_epilogue(const BiasEpilogueArgs& a, cudaStream_t stream);

// The attention kernels behind launch_attention (attention.cu dispatches with choose_attention_kernel).
void launch_attention_decode(Context& ctx, const AttentionArgs& a);     // attention_decode.cu
void launch_attention_flash(const AttentionArgs& a, cudaStream_t s);    // attention_flash.cu, cache already written
void launch_attention_generic(const AttentionArgs& a, cudaStream_t s);  // attention_generic.cu, cache written

}  // namespace moex::cuda::model
