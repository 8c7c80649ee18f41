// The CUDA experts backward (eager, batched_mm, grouped_mm, sonicmoe): bf16 on Hopper runs on the tensor cores
// (backward_sm90.cu); everything else here, in f32 SIMT: routing with align 1 (rows sorted by expert, no padding)
// -> A = X Wuᵀ + bu and G = dO Wd (row GEMMs) -> per slot h, dw, dA (in place) -> dX rows = dA Wu and the per-token
// sum -> dWu = dAᵀ X, dWd = (w dO)ᵀ h per expert -> bias column sums. Workspace: (S, N + I + 1) f32 (+ (S, H) for dx).
#include <string>

#include "cuda/backward/backward.h"
#include "cuda/backward/backward_kernels.h"
#include "cuda/backward/backward_sm90.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/routing/routing.h"

namespace moex::cuda {

using backward::kTile;
using backward::RowOperand;

namespace {

// Zero the weight and bias gradients (no token reaches any expert).
void zero_weight_grads(const ExpertsBackwardArgs& b, int64_t N, cudaStream_t stream) {
    const ExpertsArgs& a = b.fwd;
    const int64_t es = dtype_size(a.dtype);
    const struct {
        void* p;
        int64_t n;
    } all[] = {{b.grad_gate_up, a.E * N * a.H},
               {b.grad_down, a.E * a.H * a.I},
               {b.grad_gate_up_bias, a.E * N},
               {b.grad_down_bias, a.E * a.H}};
    for (const auto& g : all)
        if (g.p) CUDA_CHECK(cudaMemsetAsync(g.p, 0, size_t(g.n * es), stream));
}

}  // namespace

void run_experts_backward(const ExpertsBackwardArgs& b, void* stream_handle) {
    const ExpertsArgs& a = b.fwd;
    MOEX_REQUIRE(a.T >= 0 && a.H > 0 && a.I > 0 && a.E > 0 && a.k > 0, ErrorCode::kInvalidArgument,
                 "experts backward: T must be >= 0 and H, I, E, k > 0");
    MOEX_REQUIRE(a.weight_dtype == a.dtype && a.gate_up_scales.format == QuantFormat::kNone, ErrorCode::kUnsupported,
                 "experts backward: the CUDA backward takes weights in the activation dtype");
    MOEX_REQUIRE(a.has_gate || (a.gate.concatenated && a.gate.kind == GateKind::kDefault), ErrorCode::kInvalidArgument,
                 "experts backward: the interleaved layout and the gpt-oss gate need a gate");
    MOEX_REQUIRE(a.T * a.k < (int64_t(1) << 30), ErrorCode::kUnsupported,
                 "experts backward: T*k = " + std::to_string(a.T * a.k) + " routed rows; at most 2^30 are supported");
    const cudaStream_t stream = as_stream(stream_handle);
    const int64_t N = a.has_gate ? 2 * a.I : a.I, S = a.T * a.k, H = a.H, I = a.I, E = a.E;
    if (a.T == 0) return zero_weight_grads(b, N, stream);
    MOEX_REQUIRE(a.hidden_states && a.top_k_index && a.top_k_weights && a.gate_up_proj && a.down_proj && b.grad_out,
                 ErrorCode::kInvalidArgument, "experts backward: null tensor pointer");
    const bool want_rows = b.grad_hidden || b.grad_weights || b.grad_gate_up || b.grad_down || b.grad_gate_up_bias;
    if (!want_rows && !b.grad_down_bias) return;
    if (want_rows && backward_sm90_why_not(b) == nullptr) return run_experts_backward_sm90(b, stream);

    Workspace ws(stream);
    const RoutingBuffers rb = reserve_routing(ws, S, E, /*align=*/1, kTile, /*tile_ranges=*/true);
    const size_t au = ws.reserve_n<float>(S * N);                           // (S, N) up projection, then dA
    const size_t gh = ws.reserve_n<float>(S * I);                           // (S, I) G = dO Wd, then h
    const size_t row_w = ws.reserve_n<float>(S);                            // (S,) routing weight of each row
    const size_t dx_rows = b.grad_hidden ? ws.reserve_n<float>(S * H) : 0;  // (S, H) dA Wu
    ws.allocate();
    const RoutingArgs r = rb.args(ws, a.top_k_index, a.ids_i64);
    launch_routing(r, stream);

    // Routed rows of x and of dO, gathered by token; dO scaled by the row's routing weight (w dO, one f32 product).
    const RowOperand x_rows{.data = a.hidden_states, .row_slot = r.row_slot, .row_scale = nullptr, .ld = H, .k = a.k};
    const RowOperand wdo_rows{
        .data = b.grad_out, .row_slot = r.row_slot, .row_scale = ws.at<float>(row_w), .ld = H, .k = a.k};
    const RowOperand da_rows{.data = ws.at<float>(au), .row_slot = nullptr, .row_scale = nullptr, .ld = N, .k = a.k};
    const RowOperand h_rows{.data = ws.at<float>(gh), .row_slot = nullptr, .row_scale = nullptr, .ld = I, .k = a.k};

    if (want_rows) {
        backward::RowGemmArgs up{.A = x_rows,
                                 .B = a.gate_up_proj,
                                 .bias = a.gate_up_bias,
                                 .C = ws.at<float>(au),
                                 .tile_expert = r.tile_expert,
                                 .tile_row0 = r.tile_row0,
                                 .tile_nrows = r.tile_nrows,
                                 .num_tiles = r.num_tiles,
                                 .max_tiles = rb.tiles_bound,
                                 .N = N,
                                 .K = H,
                                 .dtype = a.dtype,
                                 .b_k_major = !a.is_transposed};  // Wu (E, N, H) | (E, H, N)
        backward::launch_row_gemm(up, stream);
        backward::RowGemmArgs g = up;  // G (S, I) = dO Wd: Wd_e(c, i) is (E, H, I) | transposed (E, I, H)
        g.A = RowOperand{.data = b.grad_out, .row_slot = r.row_slot, .row_scale = nullptr, .ld = H, .k = a.k};
        g.B = a.down_proj, g.bias = nullptr, g.C = ws.at<float>(gh), g.N = I, g.K = H, g.b_k_major = a.is_transposed;
        backward::launch_row_gemm(g, stream);
    }
    backward::GateGradArgs gate =
        backward::gate_grad_args(b, r.slot_row, ws.at<float>(au), ws.at<float>(gh), ws.at<float>(row_w));
    if (!want_rows) gate.I = 0, gate.down_bias = nullptr;  // only row_w is needed (dbd): no GEMM ran
    backward::launch_gate_grad(gate, stream);

    if (b.grad_hidden) {  // dX rows (S, H) = dA Wu: Wu_e(n, c) read as B(c, n), (E, N, H) | transposed (E, H, N)
        backward::RowGemmArgs dx{.A = da_rows,
                                 .B = a.gate_up_proj,
                                 .bias = nullptr,
                                 .C = ws.at<float>(dx_rows),
                                 .tile_expert = r.tile_expert,
                                 .tile_row0 = r.tile_row0,
                                 .tile_nrows = r.tile_nrows,
                                 .num_tiles = r.num_tiles,
                                 .max_tiles = rb.tiles_bound,
                                 .N = H,
                                 .K = N,
                                 .dtype = a.dtype,
                                 .b_k_major = a.is_transposed};
        backward::launch_row_gemm(dx, stream);
        backward::launch_token_sum(backward::token_sum_args(b, r.slot_row, ws.at<float>(dx_rows), true), stream);
    }
    auto weight_grad = [&](const RowOperand& P, const RowOperand& Q, void* C, int64_t M, int64_t L) {
        backward::launch_weight_grad({.P = P,
                                      .Q = Q,
                                      .C = C,
                                      .expert_row_start = r.expert_row_start,
                                      .expert_count = r.expert_count,
                                      .E = E,
                                      .M = M,
                                      .L = L,
                                      .dtype = a.dtype},
                                     stream);
    };
    if (b.grad_gate_up) {  // dWu (N, H) = dAᵀ X, stored transposed (H, N) = Xᵀ dA
        a.is_transposed ? weight_grad(x_rows, da_rows, b.grad_gate_up, H, N)
                        : weight_grad(da_rows, x_rows, b.grad_gate_up, N, H);
    }
    if (b.grad_down) {  // dWd (H, I) = (w dO)ᵀ h, stored transposed (I, H) = hᵀ (w dO)
        a.is_transposed ? weight_grad(h_rows, wdo_rows, b.grad_down, I, H)
                        : weight_grad(wdo_rows, h_rows, b.grad_down, H, I);
    }
    backward::launch_bias_grads(b, r.expert_row_start, r.expert_count, r.row_slot, ws.at<float>(au),
                                ws.at<float>(row_w), stream);
}

}  // namespace moex::cuda
