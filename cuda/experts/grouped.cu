// The grouped_mm pipeline (prefill): device routing into 128-row expert blocks -> gather of x -> grouped GEMM up
// (gate epilogue, bias) -> grouped GEMM down (bias, row_scale = routing weight, f32 out) -> combine in token order.
// No host sync: every size the host needs is a bound (P = S + min(E, S) * 127), so the call is graph-capturable.
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/experts/elementwise.h"
#include "cuda/experts/pipelines.h"
#include "cuda/gemm/grouped_gemm.h"
#include "cuda/routing/routing.h"

namespace moex::cuda {

void run_grouped(const ExpertsArgs& x, cudaStream_t stream) {
    const int64_t S = x.T * x.k, N = up_width(x), E = x.E;
    const int esize = act_size(x.dtype);
    const int64_t P = routing_rows_bound(S, E, kRowAlign), tiles = P / kRowAlign;

    Workspace ws(stream);
    const size_t o_count = ws.reserve_n<int32_t>(E), o_start = ws.reserve_n<int32_t>(E + 1);
    const size_t o_te = ws.reserve_n<int32_t>(tiles), o_nt = ws.reserve_n<int32_t>(1);
    const size_t o_sr = ws.reserve_n<int32_t>(S), o_rs = ws.reserve_n<int32_t>(P);
    const size_t o_scr = ws.reserve_n<int32_t>(routing_scratch_ints(S, E));
    const size_t o_a = ws.reserve(size_t(P) * size_t(x.H) * esize);
    const size_t o_scale = ws.reserve_n<float>(P);
    const size_t o_h = ws.reserve(size_t(P) * size_t(x.I) * esize);
    const size_t o_u = x.has_gate ? 0 : ws.reserve_n<float>(P * x.I);  // ungated: f32 pre-activation
    const size_t o_d = ws.reserve_n<float>(P * x.H);
    ws.allocate();

    RoutingArgs r{};
    r.ids = x.ids, r.ids_i64 = x.ids_i64, r.S = S, r.E = E, r.align = kRowAlign, r.tile_rows = kRowAlign;
    r.expert_count = ws.at<int32_t>(o_count), r.expert_row_start = ws.at<int32_t>(o_start);
    r.tile_expert = ws.at<int32_t>(o_te), r.tile_row0 = nullptr, r.tile_nrows = nullptr;
    r.num_tiles = ws.at<int32_t>(o_nt), r.slot_row = ws.at<int32_t>(o_sr), r.row_slot = ws.at<int32_t>(o_rs);
    r.zero = nullptr, r.n_zero = 0, r.scratch = ws.at<int32_t>(o_scr);
    launch_routing(r, stream);

    GatherArgs g{};
    g.x = x.x, g.A = ws.at<void>(o_a), g.row_scale = ws.at<float>(o_scale), g.topk_weights = x.topk_weights;
    g.row_slot = r.row_slot, g.total_rows = r.expert_row_start + E;
    g.rows_bound = P, g.H = x.H, g.k = x.k, g.dtype = x.dtype, g.weights_f32 = x.weights_f32;
    launch_gather_rows(g, stream);

    GroupedGemmArgs up{};
    up.A = g.A, up.B = x.w_up, up.D = x.has_gate ? ws.at<void>(o_h) : ws.at<void>(o_u), up.bias = x.b_up;
    up.row_scale = nullptr, up.m_tile_expert = r.tile_expert, up.num_m_tiles = r.num_tiles;
    up.expert_row_start = r.expert_row_start, up.expert_row_count = r.expert_count;
    up.P = P, up.N = N, up.K = x.H, up.E = E, up.max_m_tiles = tiles, up.dtype = x.dtype;
    up.b_n_major = x.is_transposed, up.d_f32 = !x.has_gate;
    up.epilogue = x.has_gate ? Epilogue::kGate : Epilogue::kStore, up.concatenated = x.is_concatenated;
    up.activation = x.activation, up.gate_kind = x.gate_kind;
    up.swiglu_alpha = x.swiglu_alpha, up.swiglu_limit = x.swiglu_limit;
    launch_grouped_gemm(up, stream);

    if (!x.has_gate) {  // the GEMM contract has no "act only" epilogue: activation in one row-wise pass
        HiddenActArgs h{};
        h.U = ws.at<float>(o_u), h.h = ws.at<void>(o_h), h.bias = nullptr, h.row_slot = r.row_slot, h.ids = x.ids;
        h.total_rows = r.expert_row_start + E, h.rows_bound = P, h.N = x.I, h.I = x.I, h.E = E;
        h.dtype = x.dtype, h.ids_i64 = x.ids_i64, h.has_gate = false, h.concatenated = true;
        h.activation = x.activation, h.gate_kind = x.gate_kind;
        h.swiglu_alpha = x.swiglu_alpha, h.swiglu_limit = x.swiglu_limit;
        launch_hidden_act(h, stream);
    }

    GroupedGemmArgs down = up;
    down.A = ws.at<void>(o_h), down.B = x.w_down, down.D = ws.at<void>(o_d), down.bias = x.b_down;
    down.row_scale = g.row_scale, down.N = x.H, down.K = x.I, down.d_f32 = true, down.epilogue = Epilogue::kStore;
    launch_grouped_gemm(down, stream);

    CombineArgs c{};
    c.Y = ws.at<float>(o_d), c.slot_row = r.slot_row, c.ids = x.ids, c.bias = nullptr, c.weights = nullptr;
    c.out = x.out, c.T = x.T, c.H = x.H, c.k = x.k, c.E = E, c.dtype = x.dtype, c.ids_i64 = x.ids_i64;
    launch_combine(c, stream);
}

}  // namespace moex::cuda
