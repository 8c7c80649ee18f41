// Launchers of router.cuh: router softmax/top-k, and the device argmax (to the host, and for captured decode steps
// into device memory).
#include <algorithm>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/pdl.cuh"
#include "cuda/model/context.h"
#include "cuda/model/router.cuh"

namespace moex::cuda::model {
namespace {

template <class TL>
void router_typed(const RouterTopkArgs& a, cudaStream_t stream, int sm_count) {
    const size_t smem = size_t(router::kWarps) * size_t(a.E + a.k) * sizeof(float);
    const unsigned grid = unsigned(std::min<int64_t>(ceil_div(a.T, router::kWarps), int64_t(sm_count) * 16));
    if (a.weights_dtype == DType::kBF16) {
        launch_pdl(router::router_topk_kernel<TL, __nv_bfloat16>, dim3(grid), dim3(router::kWarps * 32), smem, stream,
                   a);
    } else {
        launch_pdl(router::router_topk_kernel<TL, float>, dim3(grid), dim3(router::kWarps * 32), smem, stream, a);
    }
}

}  // namespace

void launch_router_topk(Context& ctx, const RouterTopkArgs& a) {
    if (a.T == 0) return;
    MOEX_REQUIRE(a.k >= 1 && a.k <= a.E, ErrorCode::kInvalidArgument, "router_topk: k must be in [1, E]");
    MOEX_REQUIRE(router::kWarps * (a.E + a.k) * int64_t(sizeof(float)) <= 48 * 1024, ErrorCode::kUnsupported,
                 "router_topk: more than 3072 experts");
    const Context::Impl& s = ctx.impl();
    if (a.logits_dtype == DType::kBF16) return router_typed<__nv_bfloat16>(a, s.stream, s.sm_count);
    router_typed<float>(a, s.stream, s.sm_count);
}

void launch_argmax(Context& ctx, const void* x, int64_t n, DType dtype, int32_t* id, int64_t* advance) {
    MOEX_REQUIRE(n >= 1 && n < (int64_t(1) << 31), ErrorCode::kInvalidArgument, "argmax: row length out of range");
    Context::Impl& s = ctx.impl();
    const int blocks = int(std::clamp<int64_t>(ceil_div(n, router::kArgmaxThreads), 1, int64_t(s.sm_count) * 2));
    auto* part = static_cast<char*>(s.ensure(s.argmax_partials, size_t(blocks) * 8));
    router::ArgmaxParams p{};
    p.x = x, p.n = n;
    p.part_v = reinterpret_cast<float*>(part);
    p.part_i = reinterpret_cast<int32_t*>(part + size_t(blocks) * 4);
    p.counter = static_cast<int32_t*>(s.ensure(s.argmax_counter, sizeof(int32_t), true));
    p.host = reinterpret_cast<int32_t*>(s.host_word_device);
    p.id = id, p.advance = advance;
    if (dtype == DType::kBF16) {
        launch_pdl(router::argmax_kernel<__nv_bfloat16>, dim3(blocks), dim3(router::kArgmaxThreads), 0, s.stream, p);
    } else {
        launch_pdl(router::argmax_kernel<float>, dim3(blocks), dim3(router::kArgmaxThreads), 0, s.stream, p);
    }
}

int64_t last_argmax(Context& ctx) {
    Context::Impl& s = ctx.impl();
    CUDA_CHECK(cudaStreamSynchronize(s.stream));
    return int64_t(*reinterpret_cast<const volatile int32_t*>(s.host_word));
}

int64_t argmax_to_host(Context& ctx, const void* x, int64_t n, DType dtype) {
    launch_argmax(ctx, x, n, dtype, nullptr, nullptr);
    return last_argmax(ctx);
}

}  // namespace moex::cuda::model
