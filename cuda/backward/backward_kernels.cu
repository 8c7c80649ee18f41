// Launchers of the backward's kernels (backward_gemm.cuh, backward_rows.cuh): one instantiation per activation
// dtype and operand pairing (a gathered operand is in the dtype, a row buffer in f32).
#include <algorithm>
#include <string>

#include "cuda/backward/backward_gemm.cuh"
#include "cuda/backward/backward_rows.cuh"
#include "cuda/common/align.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"

namespace moex::cuda::backward {
namespace {

// f(T{}) with T the element type of `dt`.
template <class F>
void with_dtype(DType dt, const char* what, F&& f) {
    switch (dt) {
        case DType::kBF16: return f(__nv_bfloat16{});
        case DType::kF16: return f(__half{});
        case DType::kF32: return f(float{});
        default:
            fail(ErrorCode::kInvalidArgument,
                 std::string(what) + ": activations must be bf16, f16 or f32, not " + std::string(dtype_name(dt)));
    }
}

// A grid-stride launch: enough CTAs to fill the device a few times over, at least one.
unsigned stride_blocks(int64_t items, int64_t per_block, int64_t per_sm) {
    const int64_t cap = int64_t(device_state().sm_count) * per_sm;
    return unsigned(std::max<int64_t>(1, std::min(ceil_div(items, per_block), cap)));
}

}  // namespace

void launch_row_gemm(const RowGemmArgs& g, cudaStream_t stream) {
    const int64_t n_tiles = ceil_div(g.N, kTile);
    MOEX_REQUIRE(g.max_tiles > 0 && g.max_tiles < (int64_t(1) << 31) && n_tiles > 0 && n_tiles < 65536,
                 ErrorCode::kUnsupported,
                 "experts backward: " + std::to_string(g.max_tiles) + " row tiles x " + std::to_string(n_tiles) +
                     " column tiles do not fit a CUDA grid");
    const dim3 grid(unsigned(g.max_tiles), unsigned(n_tiles));
    with_dtype(g.dtype, "experts backward", [&](auto tb) {
        using TB = decltype(tb);
        if (g.A.row_slot) {
            row_gemm_kernel<TB, TB><<<grid, kThreads, 0, stream>>>(g);
        } else {
            row_gemm_kernel<float, TB><<<grid, kThreads, 0, stream>>>(g);
        }
        MOEX_LAUNCH_CHECK();
    });
}

void launch_weight_grad(const WeightGradArgs& g, cudaStream_t stream) {
    const int64_t blocks = g.E * ceil_div(g.M, kTile) * ceil_div(g.L, kTile);
    MOEX_REQUIRE(blocks > 0 && blocks < (int64_t(1) << 31), ErrorCode::kUnsupported,
                 "experts backward: a weight gradient of " + std::to_string(g.E) + " x " + std::to_string(g.M) + " x " +
                     std::to_string(g.L) + " needs more CTAs than a CUDA grid has");
    MOEX_REQUIRE((g.P.row_slot == nullptr) != (g.Q.row_slot == nullptr), ErrorCode::kInvalidArgument,
                 "experts backward: a weight gradient pairs one gathered operand with one row buffer");
    with_dtype(g.dtype, "experts backward", [&](auto tc) {
        using T = decltype(tc);
        if (g.P.row_slot) {
            weight_grad_kernel<T, float, T><<<unsigned(blocks), kThreads, 0, stream>>>(g);
        } else {
            weight_grad_kernel<float, T, T><<<unsigned(blocks), kThreads, 0, stream>>>(g);
        }
        MOEX_LAUNCH_CHECK();
    });
}

void launch_column_sums(const ColumnSumArgs& a, cudaStream_t stream) {
    const unsigned blocks = stride_blocks(a.E * a.L, 256, 32);
    with_dtype(a.dtype, "experts backward", [&](auto tc) {
        using T = decltype(tc);
        if (a.src.row_slot) {
            column_sum_kernel<T, T><<<blocks, 256, 0, stream>>>(a);
        } else {
            column_sum_kernel<float, T><<<blocks, 256, 0, stream>>>(a);
        }
        MOEX_LAUNCH_CHECK();
    });
}

void launch_bias_grads(const ExpertsBackwardArgs& b, const int32_t* expert_row_start, const int32_t* expert_count,
                       const int32_t* row_slot, const float* au, const float* row_w, cudaStream_t stream) {
    const ExpertsArgs& a = b.fwd;
    const auto column_sums = [&](const RowOperand& src, void* out, int64_t L) {
        launch_column_sums({.src = src,
                            .out = out,
                            .expert_row_start = expert_row_start,
                            .expert_count = expert_count,
                            .E = a.E,
                            .L = L,
                            .dtype = a.dtype},
                           stream);
    };
    const int64_t N = a.has_gate ? 2 * a.I : a.I;
    if (b.grad_gate_up_bias)
        column_sums({.data = au, .row_slot = nullptr, .row_scale = nullptr, .ld = N, .k = a.k}, b.grad_gate_up_bias, N);
    if (b.grad_down_bias)
        column_sums({.data = b.grad_out, .row_slot = row_slot, .row_scale = row_w, .ld = a.H, .k = a.k},
                    b.grad_down_bias, a.H);
}

void launch_gate_grad(const GateGradArgs& a, cudaStream_t stream) {
    const unsigned blocks = stride_blocks(a.S, kGateWarps, 2);
    const bool vec = a.I % 4 == 0 && is_aligned16(a.AU) && is_aligned16(a.GH) && is_aligned16(a.dA_f32) &&
                     is_aligned16(a.h_f32) && is_aligned16(a.dA_out) && is_aligned16(a.wh_out);
    with_dtype(a.dtype, "experts backward", [&](auto t) {
        using T = decltype(t);
        const auto launch = [&](auto ta) {
            using TA = decltype(ta);
            if (vec) {
                gate_grad_kernel<T, TA, true><<<blocks, 32 * kGateWarps, 0, stream>>>(a);
            } else {
                gate_grad_kernel<T, TA, false><<<blocks, 32 * kGateWarps, 0, stream>>>(a);
            }
        };
        a.au_in_dtype ? launch(T{}) : launch(float{});
        MOEX_LAUNCH_CHECK();
    });
}

void launch_zero_padding(const ZeroPaddingArgs& a, cudaStream_t stream) {
    MOEX_REQUIRE(a.dtype == DType::kF32 || (a.ld[0] % 2 == 0 && a.ld[1] % 2 == 0), ErrorCode::kInvalidArgument,
                 "experts backward: padding rows of 16-bit buffers need an even row length");
    zero_padding_kernel<<<stride_blocks(a.rows_bound, 8, 16), 256, 0, stream>>>(a);
    MOEX_LAUNCH_CHECK();
}

void launch_token_sum(const TokenSumArgs& a, cudaStream_t stream) {
    const unsigned blocks = stride_blocks(a.T * ceil_div(a.H, 4), 256, 32);
    const size_t row_align = a.rows_f32 || a.dtype == DType::kF32 ? 16 : 8;
    const bool vec = a.H % 4 == 0 && is_aligned(a.rows, row_align) && is_aligned16(a.out);
    with_dtype(a.dtype, "experts backward", [&](auto t) {
        using T = decltype(t);
        const auto launch = [&](auto tr) {
            using TR = decltype(tr);
            if (vec) {
                token_sum_kernel<T, TR, true><<<blocks, 256, 0, stream>>>(a);
            } else {
                token_sum_kernel<T, TR, false><<<blocks, 256, 0, stream>>>(a);
            }
        };
        a.rows_f32 ? launch(float{}) : launch(T{});
        MOEX_LAUNCH_CHECK();
    });
}

}  // namespace moex::cuda::backward
