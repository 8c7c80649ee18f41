// Launcher of the split-K decode attention (attention_decode.cuh): the split count, the partials and counters from
// the Context's scratch, one instantiation per (dtype, head_dim) in {bf16, f32} x {64, 128, 256}.
#include <algorithm>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/pdl.cuh"
#include "cuda/model/attention_decode.cuh"
#include "cuda/model/context.h"
#include "cuda/model/internal.h"

namespace moex::cuda::model {
namespace {

template <class T, int D>
void decode_typed(Context::Impl& s, const AttentionArgs& a) {
    constexpr int C = decode::kChunk<D>;
    decode::DecodeParams p{};
    p.q = a.q, p.k = a.k, p.v = a.v, p.k_cache = a.k_cache, p.v_cache = a.v_cache, p.out = a.out;
    p.ld_q = a.ld_q, p.ld_k = a.ld_k, p.ld_v = a.ld_v, p.ld_out = a.ld_out, p.ld_cache = a.nkv * a.D;
    p.pos0 = a.pos0, p.window = a.window;
    p.key_begin = a.window > 0 ? std::max<int64_t>(0, a.pos0 - a.window + 1) : 0;
    p.key_end = a.pos0 + a.T;
    p.T = int32_t(a.T), p.G = int32_t(a.nq / a.nkv), p.M = p.T * p.G;
    p.scale_log2 = a.scale * 1.4426950408889634f;
    p.pos_device = a.pos_device, p.max_len = a.max_len, p.sm_count = s.sm_count;

    const DecodeSplit split = choose_decode_split(p.key_end - p.key_begin, a.nkv, s.sm_count, C, decode::kMaxSplits);
    p.splits = int32_t(split.splits);
    p.keys_per_split = split.keys_per_split;
    // The most splits choose_decode_split can give this layout: the grid of a kernel that reads its position from
    // device memory (it derives its own split and idles the CTAs past it).
    const int64_t most = std::min<int64_t>(decode::kMaxSplits, ceil_div(s.sm_count, a.nkv));
    const int64_t grid_splits = a.pos_device != nullptr ? most : p.splits;

    if (grid_splits > 1) {
        // Sized for `most` splits (and 16 rows), so the buffer does not grow while the cache fills: later steps
        // allocate nothing (and can be captured in a CUDA graph).
        const size_t cap_rows = size_t(a.nkv) * size_t(std::max<int64_t>(most, p.splits)) * decode::kMaxRows;
        const size_t o_bytes = cap_rows * size_t(D) * sizeof(float);  // whatever split the kernel takes
        char* part = static_cast<char*>(s.ensure(s.attn_partials, cap_rows * (size_t(D) * sizeof(float) + 8)));
        p.part_o = reinterpret_cast<float*>(part);
        p.part_ml = reinterpret_cast<float2*>(part + o_bytes);
        p.counters = static_cast<int32_t*>(s.ensure(s.attn_counters, size_t(a.nkv) * sizeof(int32_t), true));
    }
    constexpr size_t smem = decode::smem_bytes<T, D>();
    allow_dynamic_smem(decode::attention_decode_kernel<T, D>, smem);
    const dim3 grid(unsigned(grid_splits), unsigned(a.nkv));
    launch_pdl(decode::attention_decode_kernel<T, D>, dim3(grid), dim3(decode::kThreads), smem, s.stream, p);
}

template <class T>
void decode_dim(Context::Impl& s, const AttentionArgs& a) {
    switch (a.D) {
        case 64: return decode_typed<T, 64>(s, a);
        case 128: return decode_typed<T, 128>(s, a);
        case 256: return decode_typed<T, 256>(s, a);
        default: fail(ErrorCode::kUnsupported, "decode attention: head_dim must be 64, 128 or 256");
    }
}

}  // namespace

void launch_attention_decode(Context& ctx, const AttentionArgs& a) {
    MOEX_REQUIRE(a.T * (a.nq / a.nkv) <= decode::kMaxRows, ErrorCode::kInvalidArgument,
                 "decode attention: more than 16 query rows per kv head");
    if (a.dtype == DType::kBF16) return decode_dim<__nv_bfloat16>(ctx.impl(), a);
    decode_dim<float>(ctx.impl(), a);
}

}  // namespace moex::cuda::model
