// The one-kernel decode path of batched_mm (decode_stream.cuh): which calls it takes, and its two launches (the
// counters' zeroing, then the persistent kernel, chained by programmatic dependent launch).
#include <algorithm>
#include <atomic>

#include "cuda/common/align.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/env.h"
#include "cuda/experts/decode_stream.cuh"
#include "cuda/experts/pipelines.h"

namespace moex::cuda {
namespace {

std::atomic<uint64_t> g_calls{0};

// Opt-in for now: MOEX_DECODE_STREAM=1 takes the one-kernel path for the calls it fits (read per call, so tests and
// A/B timings switch it in one process). Measured at par with the three-launch pipeline, not ahead of it
// (bench/RESULTS.md W), so it is not the default yet.
bool stream_enabled() { return env_is("MOEX_DECODE_STREAM", "1"); }

template <class T, int NT>
void launch(const decode::StreamArgs& s, int grid, cudaStream_t stream) {
    auto kernel = decode::decode_stream_kernel<T, NT>;
    constexpr size_t smem = decode::Ring<NT>::kBytes;
    allow_dynamic_smem(kernel, smem);
    launch_pdl(kernel, dim3(grid), dim3(decode::kThreads), smem, stream, s);
}

// The most shared memory one of the kernels takes: its ring and its static part (barriers, routes, partial sums).
template <int NT>
size_t smem_bytes() {
    cudaFuncAttributes f{};
    CUDA_CHECK(cudaFuncGetAttributes(&f, decode::decode_stream_kernel<__nv_bfloat16, NT>));  // f16: the same sizes
    return decode::Ring<NT>::kBytes + f.sharedSizeBytes;
}

}  // namespace

bool decode_stream_fits(const ExpertsArgs& a) {
    if (!stream_enabled()) return false;
    const DeviceState& d = device_state();
    if (!d.sm90) return false;                                              // the sm_90a kernels load nowhere else
    static const size_t smem = std::max(smem_bytes<1>(), smem_bytes<2>());  // a property of the compiled kernels
    return (a.dtype == DType::kBF16 || a.dtype == DType::kF16) && a.weight_dtype == a.dtype &&
           a.gate_up_scales.format == QuantFormat::kNone && !a.is_transposed && a.T >= 1 && a.T <= 16 &&
           a.T * a.k <= decode::kMaxSlots && a.H % 8 == 0 && a.I % 8 == 0 && is_aligned16(a.hidden_states) &&
           is_aligned16(a.gate_up_proj) && is_aligned16(a.down_proj) && d.smem_optin >= smem;
}

uint64_t decode_stream_calls() { return g_calls.load(); }

void run_decode_stream(const ExpertsArgs& a, cudaStream_t stream) {
    g_calls.fetch_add(1);
    const int64_t S = a.T * a.k, col_blocks = ceil_div(a.H, 16);
    Workspace ws(stream);
    const size_t h = ws.reserve(size_t(S) * size_t(a.I) * dtype_size(a.dtype));
    const size_t y = ws.reserve_n<float>(S * a.H);
    const size_t counters = ws.reserve_n<int32_t>(decode::kMaxSlots + col_blocks);
    ws.allocate();

    int32_t* zero = ws.at<int32_t>(counters);
    launch_pdl(decode::decode_stream_zero_kernel, dim3(1), dim3(256), 0, stream, zero,
               int64_t(decode::kMaxSlots + col_blocks));
    const decode::StreamArgs s{.x = a.hidden_states,
                               .ids = a.top_k_index,
                               .topk_w = a.top_k_weights,
                               .w_up = a.gate_up_proj,
                               .w_down = a.down_proj,
                               .b_up = a.gate_up_bias,
                               .b_down = a.down_bias,
                               .h = ws.at<void>(h),
                               .y = ws.at<float>(y),
                               .out = a.out,
                               .tile_done = zero,
                               .col_arrive = zero + decode::kMaxSlots,
                               .T = a.T,
                               .H = a.H,
                               .I = a.I,
                               .E = a.E,
                               .k = a.k,
                               .gate = a.gate,
                               .has_gate = a.has_gate,
                               .ids_i64 = a.ids_i64,
                               .weights_f32 = a.weights_f32,
                               .dtype = a.dtype};
    // One CTA per SM, all resident at once: a CTA's down units wait for other CTAs' up units (decode_stream.cuh).
    const int grid = device_state().sm_count;
    const bool two = a.T > 8;  // tiles of 16 token rows (T <= 8: 8 rows, more stages)
    if (a.dtype == DType::kBF16)
        return two ? launch<__nv_bfloat16, 2>(s, grid, stream) : launch<__nv_bfloat16, 1>(s, grid, stream);
    return two ? launch<__half, 2>(s, grid, stream) : launch<__half, 1>(s, grid, stream);
}

}  // namespace moex::cuda
