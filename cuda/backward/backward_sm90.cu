// The experts backward on Hopper's tensor cores (bf16): the same math as the SIMT backward (backward.cu), with its five
// GEMMs as wgmma GEMMs over the padded-contiguous layout of the forward's grouped pipeline.
//   routing (128-row expert blocks) -> gathered rows of x and of dO (zero padding rows)
//   -> A = X Wuᵀ + bu (the forward's sm_90a grouped GEMM, bf16 out; skipped when the forward kept A, ExpertsSaved)
//   and G = dO Wd (f32 out) -> per slot h, dw, dA (gate_grad, which also writes dA and w·h in bf16) -> dX rows =
//   dA Wu (grouped GEMM, bf16) and the per-token sum (f32) -> dWu = dAᵀ X, dWd = dOᵀ (w h) (weight_grad_sm90: the
//   expert's rows are the K loop) -> bias column sums (f32 rows).
// Nothing (S, H)-sized is kept from the forward: at most its (S, N) pre-activation A, in bf16 as transformers'
// autograd keeps its gate_up output (the recomputed A is rounded the same way, so both give the same bits). No float
// atomics: every output has one fixed order, so two runs give the same bits.
#include <cstdlib>
#include <cstring>

#include "cuda/backward/backward.h"
#include "cuda/backward/backward_kernels.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/gemm/grouped_gemm.h"
#include "cuda/gemm/weight_grad.h"
#include "cuda/routing/routing.h"

namespace moex::cuda {
namespace {

// The GEMMs of one backward call; the pointers are filled once the workspace exists.
struct Gemms {
    GroupedGemmArgs up, g, dx;
    WeightGradGemmArgs dwu, dwd;
};

Gemms describe(const ExpertsBackwardArgs& b, const RoutingArgs* r, int64_t P, int64_t tiles) {
    const ExpertsArgs& a = b.fwd;
    const int64_t N = a.has_gate ? 2 * a.I : a.I;
    Gemms m{};
    m.up = GroupedGemmArgs{.A = nullptr,
                           .B = a.gate_up_proj,
                           .D = nullptr,
                           .bias = a.gate_up_bias,
                           .row_scale = nullptr,
                           .m_tile_expert = r ? r->tile_expert : nullptr,
                           .num_m_tiles = r ? r->num_tiles : nullptr,
                           .expert_row_start = r ? r->expert_row_start : nullptr,
                           .expert_row_count = r ? r->expert_count : nullptr,
                           .P = P,
                           .N = N,
                           .K = a.H,
                           .E = a.E,
                           .max_m_tiles = tiles,
                           .dtype = a.dtype,
                           .b_n_major = a.is_transposed,  // Wu (E, N, H) | (E, H, N)
                           .d_f32 = false,
                           .epilogue = Epilogue::kStore,
                           .gate = a.gate,
                           .b_dtype = a.dtype,
                           .b_scales = {},
                           .a_scales = nullptr,
                           .a_fp8 = false};
    m.g = m.up;  // G (P, I) = dO Wd: Wd_e(i, c) read from (E, H, I) (K-by-N) | transposed (E, I, H)
    m.g.B = a.down_proj, m.g.bias = nullptr, m.g.N = a.I, m.g.K = a.H, m.g.b_n_major = !a.is_transposed;
    m.g.d_f32 = true;
    m.dx = m.up;  // dX rows (P, H) = dA Wu: Wu_e(c, n) read from (E, N, H) (K-by-N) | transposed (E, H, N)
    m.dx.bias = nullptr, m.dx.N = a.H, m.dx.K = N, m.dx.b_n_major = !a.is_transposed;
    const WeightGradGemmArgs w{.A = nullptr,
                               .B = nullptr,
                               .C = nullptr,
                               .expert_row_start = r ? r->expert_row_start : nullptr,
                               .expert_row_count = r ? r->expert_count : nullptr,
                               .P = P,
                               .M = 0,
                               .N = 0,
                               .E = a.E,
                               .dtype = a.dtype};
    // dWu (N, H) = dAᵀ X, stored transposed (H, N) = Xᵀ dA; dWd (H, I) = dOᵀ (w h), transposed (I, H) = (w h)ᵀ dO.
    m.dwu = w, m.dwd = w;
    m.dwu.C = b.grad_gate_up, m.dwd.C = b.grad_down;
    m.dwu.M = a.is_transposed ? a.H : N, m.dwu.N = a.is_transposed ? N : a.H;
    m.dwd.M = a.is_transposed ? a.I : a.H, m.dwd.N = a.is_transposed ? a.H : a.I;
    return m;
}

// Placeholder pointers for the static checks: aligned, non-null (the checks look at alignment, not at memory).
void* const kAligned = reinterpret_cast<void*>(uintptr_t(256));
const int32_t* const kInts = reinterpret_cast<const int32_t*>(uintptr_t(256));

}  // namespace

const char* backward_sm90_why_not(const ExpertsBackwardArgs& b) {
    const ExpertsArgs& a = b.fwd;
    if (const char* env = std::getenv("MOEX_BACKWARD"); env != nullptr && std::strcmp(env, "simt") == 0)
        return "MOEX_BACKWARD=simt";
    if (!device_state().sm90) return "the device is not an sm_90 (Hopper) GPU";
    if (a.dtype != DType::kBF16) return "the tensor-core backward takes bf16 (f16 and f32 run in f32 SIMT)";
    if (a.T == 0) return "no tokens";
    const int64_t S = a.T * a.k, P = routing_rows_bound(S, a.E, kRowAlign);
    const RoutingArgs fake{.expert_count = const_cast<int32_t*>(kInts),
                           .expert_row_start = const_cast<int32_t*>(kInts),
                           .tile_expert = const_cast<int32_t*>(kInts),
                           .num_tiles = const_cast<int32_t*>(kInts)};
    Gemms m = describe(b, &fake, P, P / kRowAlign);
    for (GroupedGemmArgs* g : {&m.up, &m.g, &m.dx}) {
        g->A = kAligned, g->D = kAligned;
        if (const char* why = sm90_refusal(*g)) return why;
    }
    for (WeightGradGemmArgs* w : {&m.dwu, &m.dwd}) {
        w->A = kAligned, w->B = kAligned;  // C is the caller's gradient: its own alignment is checked
        if (w->C == nullptr) w->C = kAligned;
        if (const char* why = weight_grad_sm90_why_not(*w)) return why;
    }
    return nullptr;
}

const char* backward_save_why_not(const ExpertsArgs& fwd) {
    if (const char* why = grouped_save_why_not(fwd)) return why;
    return backward_sm90_why_not(ExpertsBackwardArgs{.fwd = fwd});
}

void run_experts_backward_sm90(const ExpertsBackwardArgs& b, cudaStream_t stream) {
    const ExpertsArgs& a = b.fwd;
    const int64_t N = a.has_gate ? 2 * a.I : a.I, S = a.T * a.k, H = a.H, I = a.I, E = a.E, es = 2;

    Workspace ws(stream);
    const RoutingBuffers rb = reserve_routing(ws, S, E, kRowAlign, kRowAlign);
    const int64_t P = rb.rows_bound;
    const size_t x_rows = ws.reserve(size_t(P * H * es));   // (P, H) gathered x
    const size_t do_rows = ws.reserve(size_t(P * H * es));  // (P, H) gathered dO
    const size_t row_w = ws.reserve_n<float>(P);            // (P,) routing weight of each row
    const bool saved = a.saved_gate_up != nullptr;          // the forward kept A (its packed rows): no up GEMM here
    const size_t au = saved ? 0 : ws.reserve(size_t(P * N * es));               // (P, N) up projection in bf16
    const size_t da32 = b.grad_gate_up_bias ? ws.reserve_n<float>(P * N) : 0;   // (P, N) dA in f32 for the bias
    const size_t gh = ws.reserve_n<float>(P * I);                               // (P, I) G = dO Wd
    const size_t da16 = ws.reserve(size_t(P * N * es));                         // (P, N) dA in bf16
    const size_t wh16 = ws.reserve(size_t(P * I * es));                         // (P, I) w·h in bf16
    const size_t dx_rows = b.grad_hidden ? ws.reserve(size_t(P * H * es)) : 0;  // (P, H) dA Wu in bf16
    ws.allocate();
    const RoutingArgs r = rb.args(ws, a.top_k_index, a.ids_i64);
    launch_routing(r, stream);

    auto gather = [&](const void* src, size_t dst, float* scale) {
        launch_gather_rows(GatherArgs{.x = src,
                                      .A = ws.at<void>(dst),
                                      .row_scale = scale,
                                      .topk_weights = a.top_k_weights,
                                      .row_slot = r.row_slot,
                                      .slot_row = r.slot_row,
                                      .total_rows = r.expert_row_start + E,
                                      .rows_bound = P,
                                      .H = H,
                                      .k = a.k,
                                      .T = a.T,
                                      .dtype = a.dtype,
                                      .weights_f32 = a.weights_f32},
                           stream);
    };
    gather(a.hidden_states, x_rows, ws.at<float>(row_w));
    gather(b.grad_out, do_rows, nullptr);

    Gemms m = describe(b, &r, P, rb.tiles_bound);
    if (!saved) {
        m.up.A = ws.at<void>(x_rows), m.up.D = ws.at<void>(au);
        launch_grouped_gemm(m.up, stream);
    }
    m.g.A = ws.at<void>(do_rows), m.g.D = ws.at<void>(gh);
    launch_grouped_gemm(m.g, stream);

    float* const dA_f32 = b.grad_gate_up_bias ? ws.at<float>(da32) : nullptr;
    backward::GateGradArgs gate =
        backward::gate_grad_args(b, r.slot_row, nullptr, ws.at<float>(gh), ws.at<float>(row_w));
    gate.AU = saved ? a.saved_gate_up : ws.at<void>(au), gate.au_in_dtype = true;
    gate.au_row = saved ? a.saved_slot_row : nullptr;  // the forward's packed row of each slot
    // dA and w·h in bf16 feed the GEMMs; dA in f32 only feeds the gate_up bias's column sums, and h in f32 nothing.
    gate.dA_f32 = dA_f32, gate.h_f32 = nullptr;
    gate.dA_out = ws.at<void>(da16), gate.wh_out = ws.at<void>(wh16);
    backward::launch_gate_grad(gate, stream);
    backward::launch_zero_padding({.rows = {ws.at<void>(da16), ws.at<void>(wh16)},
                                   .ld = {N, I},
                                   .row_slot = r.row_slot,
                                   .total_rows = r.expert_row_start + E,
                                   .rows_bound = P,
                                   .dtype = a.dtype},
                                  stream);

    if (b.grad_hidden) {
        // The rows in bf16, as transformers' grouped_mm backward has them (one rounding of each of the k terms of a
        // token's sum, inside the tensor-core path's bound), summed per token in f32: half the bytes of f32 rows.
        m.dx.A = ws.at<void>(da16), m.dx.D = ws.at<void>(dx_rows), m.dx.d_f32 = false;
        launch_grouped_gemm(m.dx, stream);
        backward::launch_token_sum(backward::token_sum_args(b, r.slot_row, ws.at<float>(dx_rows), false), stream);
    }
    if (b.grad_gate_up) {
        m.dwu.A = ws.at<void>(a.is_transposed ? x_rows : da16), m.dwu.B = ws.at<void>(a.is_transposed ? da16 : x_rows);
        launch_weight_grad_sm90(m.dwu, stream);
    }
    if (b.grad_down) {
        m.dwd.A = ws.at<void>(a.is_transposed ? wh16 : do_rows),
        m.dwd.B = ws.at<void>(a.is_transposed ? do_rows : wh16);
        launch_weight_grad_sm90(m.dwd, stream);
    }
    backward::launch_bias_grads(b, r.expert_row_start, r.expert_count, r.row_slot, dA_f32, ws.at<float>(row_w), stream);
}

}  // namespace moex::cuda
