// Launchers of elementwise.cuh: embedding, the Eltwise ops, the KV-cache write and the linear bias epilogue.
#include <algorithm>
#include <cstring>

#include "cuda/common/align.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/pdl.cuh"
#include "cuda/model/context.h"
#include "cuda/model/elementwise.cuh"

namespace moex::cuda::model {
namespace {

using namespace elementwise;

unsigned rows_grid(int64_t T) { return unsigned(std::min<int64_t>(T, 65535)); }

// The widest copy unit (16, 4 or 2 bytes) that divides every byte offset.
int copy_unit(int64_t a, int64_t b, int64_t c, int64_t d) {
    const uint64_t all = uint64_t(a) | uint64_t(b) | uint64_t(c) | uint64_t(d);
    return all % 16 == 0 ? 16 : all % 4 == 0 ? 4 : 2;
}

template <class T, Eltwise OP>
void eltwise_typed(const EltwiseArgs& a, cudaStream_t stream, int sm_count) {
    constexpr int V = kVec16<T>;
    const int64_t es = sizeof(T);
    bool vec = a.W % V == 0 && is_aligned16(a.a) && is_aligned16(a.out) && (a.ld_a * es) % 16 == 0 &&
               (a.ld_out * es) % 16 == 0;
    if (OP == Eltwise::kAdd) vec = vec && is_aligned16(a.b) && (a.ld_b * es) % 16 == 0;
    const int per = vec ? V : 1;
    const int64_t xblocks = std::max<int64_t>(1, ceil_div(a.W, int64_t(kThreads) * per));
    const int64_t yblocks = std::min<int64_t>(a.T, std::max<int64_t>(1, int64_t(sm_count) * 16 / xblocks));
    const dim3 grid(unsigned(std::min<int64_t>(xblocks, 65535)), rows_grid(std::max<int64_t>(yblocks, 1)));
    if (vec) {
        eltwise_kernel<T, OP, V><<<grid, kThreads, 0, stream>>>(a);
    } else {
        eltwise_kernel<T, OP, 1><<<grid, kThreads, 0, stream>>>(a);
    }
    MOEX_LAUNCH_CHECK();
}

template <class T>
void eltwise_dispatch(const EltwiseArgs& a, cudaStream_t stream, int sm_count) {
    switch (a.op) {
        case Eltwise::kAdd: return eltwise_typed<T, Eltwise::kAdd>(a, stream, sm_count);
        case Eltwise::kClamp: return eltwise_typed<T, Eltwise::kClamp>(a, stream, sm_count);
        case Eltwise::kGatedAct: return eltwise_typed<T, Eltwise::kGatedAct>(a, stream, sm_count);
        case Eltwise::kSigmoidGateAdd: return eltwise_typed<T, Eltwise::kSigmoidGateAdd>(a, stream, sm_count);
    }
}

}  // namespace

void launch_embed(Context& ctx, const EmbedArgs& a) {
    if (a.T == 0 || a.H == 0) return;
    Context::Impl& s = ctx.impl();
    const int64_t es = dtype_size(a.dtype);
    EmbedParams p{};
    p.table = static_cast<const char*>(a.table);
    p.out = static_cast<char*>(a.out);
    p.T = a.T, p.row_bytes = a.H * es, p.ld_out_bytes = a.ld_out * es;
    if (a.ids_device != nullptr) {
        p.ids_dev = a.ids_device;
    } else if (a.T <= kInlineIds) {
        std::memcpy(p.ids, a.ids, size_t(a.T) * sizeof(int32_t));
    } else {
        const size_t bytes = size_t(a.T) * sizeof(int32_t);
        auto* dev = static_cast<int32_t*>(s.ensure(s.ids, bytes));
        // From pageable memory the copy is staged before the call returns, so `a.ids` may be freed afterwards.
        CUDA_CHECK(cudaMemcpyAsync(dev, a.ids, bytes, cudaMemcpyHostToDevice, s.stream));
        p.ids_dev = dev;
    }
    const int unit =
        copy_unit(reinterpret_cast<intptr_t>(a.table), reinterpret_cast<intptr_t>(a.out), p.row_bytes, p.ld_out_bytes);
    const unsigned grid = rows_grid(a.T);
    if (unit == 16) {
        launch_pdl(embed_kernel<uint4>, dim3(grid), dim3(kThreads), 0, s.stream, p);
    } else if (unit == 4) {
        launch_pdl(embed_kernel<uint32_t>, dim3(grid), dim3(kThreads), 0, s.stream, p);
    } else {
        launch_pdl(embed_kernel<uint16_t>, dim3(grid), dim3(kThreads), 0, s.stream, p);
    }
}

void launch_eltwise(Context& ctx, const EltwiseArgs& a) {
    if (a.T == 0 || a.W == 0) return;
    const Context::Impl& s = ctx.impl();
    if (a.dtype == DType::kBF16) return eltwise_dispatch<__nv_bfloat16>(a, s.stream, s.sm_count);
    MOEX_REQUIRE(a.dtype == DType::kF32, ErrorCode::kUnsupported, "model ops: activations must be bf16 or f32");
    eltwise_dispatch<float>(a, s.stream, s.sm_count);
}

void launch_kv_write(const KvWriteArgs& a, cudaStream_t stream) {
    if (a.T == 0 || a.width == 0) return;
    const int64_t es = dtype_size(a.dtype);
    KvWriteParams p{};
    p.k = static_cast<const char*>(a.k), p.v = static_cast<const char*>(a.v);
    p.k_cache = static_cast<char*>(a.k_cache), p.v_cache = static_cast<char*>(a.v_cache);
    p.T = a.T, p.pos0 = a.pos0, p.row_bytes = a.width * es, p.ld_k_bytes = a.ld_k * es, p.ld_v_bytes = a.ld_v * es;
    const int unit =
        std::min(copy_unit(reinterpret_cast<intptr_t>(a.k), reinterpret_cast<intptr_t>(a.v), p.row_bytes, p.ld_k_bytes),
                 copy_unit(reinterpret_cast<intptr_t>(a.k_cache), reinterpret_cast<intptr_t>(a.v_cache), p.ld_v_bytes,
                           p.row_bytes));
    const unsigned grid = rows_grid(a.T);
    if (unit == 16) {
        kv_write_kernel<uint4><<<grid, kThreads, 0, stream>>>(p);
    } else if (unit == 4) {
        kv_write_kernel<uint32_t><<<grid, kThreads, 0, stream>>>(p);
    } else {
        kv_write_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(p);
    }
    MOEX_LAUNCH_CHECK();
}

void launch_bias_epilogue(const BiasEpilogueArgs& a, cudaStream_t stream) {
    if (a.T == 0 || a.N == 0) return;
    const dim3 grid(unsigned(std::min<int64_t>(ceil_div(a.N, kThreads), 1024)), rows_grid(a.T));
    if (a.dtype == DType::kBF16) {
        if (a.out_f32) {
            bias_epilogue_kernel<float, __nv_bfloat16><<<grid, kThreads, 0, stream>>>(a);
        } else {
            bias_epilogue_kernel<__nv_bfloat16, __nv_bfloat16><<<grid, kThreads, 0, stream>>>(a);
        }
    } else {
        bias_epilogue_kernel<float, float><<<grid, kThreads, 0, stream>>>(a);
    }
    MOEX_LAUNCH_CHECK();
}

}  // namespace moex::cuda::model
