// The grouped_mm pipeline (prefill): device routing into 128-row expert blocks -> gather of x -> grouped GEMM up
// (gate epilogue, bias) -> grouped GEMM down (bias, row_scale = routing weight, f32 out) -> combine in token order.
// No host sync: every size the host needs is a bound (P = S + min(E, S) * 127), so the call is graph-capturable.
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/experts/pipelines.h"
#include "cuda/gemm/grouped_gemm.h"

namespace moex::cuda {

void run_grouped(const ExpertsArgs& a, cudaStream_t stream) {
    const int64_t S = a.T * a.k, N = up_width(a), E = a.E, esize = dtype_size(a.dtype);

    Workspace ws(stream);
    const RoutingBuffers rb = reserve_routing(ws, S, E, kRowAlign, kRowAlign);
    const int64_t P = rb.rows_bound;
    const size_t x_rows = ws.reserve(size_t(P) * size_t(a.H) * esize);    // (P, H) gathered hidden states
    const size_t row_scale = ws.reserve_n<float>(P);                      // (P,) routing weight of each row
    const size_t h_rows = ws.reserve(size_t(P) * size_t(a.I) * esize);    // (P, I) hidden activation
    const size_t u_rows = a.has_gate ? 0 : ws.reserve_n<float>(P * a.I);  // ungated: (P, I) f32 pre-activation
    const size_t y_rows = ws.reserve_n<float>(P * a.H);                   // (P, H) f32 down projection, weighted
    ws.allocate();

    const RoutingArgs r = rb.args(ws, a.top_k_index, a.ids_i64);
    launch_routing(r, stream);

    launch_gather_rows(gather_args(a, r, ws.at<void>(x_rows), ws.at<float>(row_scale), P), stream);

    const GroupedGemmArgs up{.A = ws.at<void>(x_rows),
                             .B = a.gate_up_proj,
                             .D = a.has_gate ? ws.at<void>(h_rows) : ws.at<void>(u_rows),
                             .bias = a.gate_up_bias,
                             .row_scale = nullptr,
                             .m_tile_expert = r.tile_expert,
                             .num_m_tiles = r.num_tiles,
                             .expert_row_start = r.expert_row_start,
                             .expert_row_count = r.expert_count,
                             .P = P,
                             .N = N,
                             .K = a.H,
                             .E = E,
                             .max_m_tiles = rb.tiles_bound,
                             .dtype = a.dtype,
                             .b_n_major = a.is_transposed,
                             .d_f32 = !a.has_gate,
                             .epilogue = a.has_gate ? Epilogue::kGate : Epilogue::kStore,
                             .gate = a.gate,
                             .b_dtype = a.weight_dtype,
                             .b_scales = a.gate_up_scales};
    launch_grouped_gemm(up, stream);

    if (!a.has_gate) {  // the GEMM contract has no "act only" epilogue: activation in one row-wise pass
        launch_hidden_act(hidden_act_args(a, r, ws.at<float>(u_rows), ws.at<void>(h_rows), P, a.I, nullptr, false),
                          stream);
    }

    GroupedGemmArgs down = up;
    down.A = ws.at<void>(h_rows), down.B = a.down_proj, down.D = ws.at<void>(y_rows), down.bias = a.down_bias;
    down.row_scale = ws.at<float>(row_scale), down.N = a.H, down.K = a.I, down.d_f32 = true;
    down.epilogue = Epilogue::kStore, down.b_scales = a.down_scales;
    launch_grouped_gemm(down, stream);

    launch_combine(combine_args(a, ws.at<float>(y_rows), r.slot_row, /*weighted=*/false), stream);
}

}  // namespace moex::cuda
