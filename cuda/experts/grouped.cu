// The grouped_mm pipeline (prefill): device routing into expert blocks of rows -> gather of x -> grouped GEMM up
// (gate epilogue, bias) -> grouped GEMM down (bias, row_scale = routing weight; bf16 rows in a bf16 call, else f32)
// -> combine in token order. grouped_mm packs the blocks (S rows, 128-row tiles from each expert's first row, the
// next expert's rows in a last tile computed and not stored); deepgemm pads each to 128 rows (DeepGEMM's
// TMA-aligned contiguous layout), P = S + min(E, S) * 127 rows.
// Quantized activations are rounded after the gather and after the up GEMM (e4m3 bytes for the FP8 kernel; its x
// is gathered and rounded in one pass, and its h rounded in the up GEMM's epilogue for dynamic groups of 128).
// No host sync: every size the host needs is a bound (P, the tile count), so the call is graph-capturable.
#include <algorithm>
#include <string>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/env.h"
#include "cuda/experts/pipelines.h"
#include "cuda/gemm/grouped_gemm.h"

namespace moex::cuda {

// The pipeline's A/B switches (env_is, cuda/common/env.h), read per call so a test can flip them:
// MOEX_FUSED_H_QUANT=0 quantizes h in its own pass after the up GEMM (the earlier form, for timing and for the tests'
// twin run); MOEX_Y_F32=1 see y_rows; MOEX_PACKED_ROWS=0 pads grouped_mm's expert blocks as deepgemm does (the
// earlier layout).

namespace {

// One projection's GroupedGemmArgs with placeholder pointers (aligned, never read) and the packed layout's tile
// bound: enough for sm90_refusal to say whether the TMA kernels take the call, before anything is allocated.
GroupedGemmArgs probe_args(const ExpertsArgs& a, bool up) {
    static const int32_t kInt = 0;
    const int64_t S = a.T * a.k;
    void* const aligned = reinterpret_cast<void*>(uintptr_t(256));
    GroupedGemmArgs g{.A = aligned,
                      .B = aligned,
                      .D = aligned,
                      .bias = up ? a.gate_up_bias : a.down_bias,
                      .row_scale = nullptr,
                      .m_tile_expert = &kInt,
                      .num_m_tiles = &kInt,
                      .expert_row_start = &kInt,
                      .expert_row_count = &kInt,
                      .P = S,
                      .N = up ? up_width(a) : a.H,
                      .K = up ? a.H : a.I,
                      .E = a.E,
                      .max_m_tiles = routing_tiles_bound(S, a.E, 1, kRowAlign),
                      .dtype = a.dtype,
                      .b_n_major = a.is_transposed,
                      .d_f32 = false,
                      .epilogue = up && a.has_gate ? Epilogue::kGate : Epilogue::kStore,
                      .gate = a.gate,
                      .b_dtype = a.weight_dtype,
                      .b_scales = up ? a.gate_up_scales : a.down_scales,
                      .a_scales = nullptr,
                      .a_fp8 = false};
    return g;
}

}  // namespace

const char* grouped_save_why_not(const ExpertsArgs& a) {
    if (!a.has_gate) return "ungated experts (their backward recomputes the up projection)";
    if (a.dtype != DType::kBF16) return "the kept pre-activation feeds the bf16 tensor-core backward only";
    if (a.gate_up_scales.format != QuantFormat::kNone || a.weight_dtype != a.dtype)
        return "quantized weights have no backward";
    if (env_is("MOEX_PACKED_ROWS", "0")) return "MOEX_PACKED_ROWS=0 (the kept rows are the packed layout's)";
    if (gemm_forced_portable()) return "MOEX_GEMM=portable (the portable GEMM has no epilogue that keeps it)";
    if (!device_state().sm90) return "the device is not an sm_90 (Hopper) GPU";
    GroupedGemmArgs up = probe_args(a, true);
    up.epilogue = Epilogue::kGateSave;
    up.save = up.D;
    return sm90_refusal(up);
}

const char* grouped_sm90_why_not(const ExpertsArgs& a) {
    if (const char* why = sm90_refusal(probe_args(a, true))) return why;
    return sm90_refusal(probe_args(a, false));
}

void run_grouped(const ExpertsArgs& a, cudaStream_t stream) { run_grouped(a, stream, GroupedOptions{}); }

void run_grouped(const ExpertsArgs& a, cudaStream_t stream, const GroupedOptions& options) {
    const bool sm90_only = options.sm90_only;
    const int64_t S = a.T * a.k, N = up_width(a), E = a.E, esize = dtype_size(a.dtype);
    // A training forward keeps x·Wuᵀ + bu of every row (packed: rows_bound == S) through the up GEMM's epilogue;
    // run_experts checked grouped_save_why_not.
    const bool save = a.saved_gate_up != nullptr;

    Workspace ws(stream);
    const bool packed = !sm90_only && !env_is("MOEX_PACKED_ROWS", "0");
    MOEX_REQUIRE(!save || packed, ErrorCode::kUnsupported, "grouped: the kept pre-activation needs the packed rows");
    const RoutingBuffers rb = reserve_routing(ws, S, E, packed ? 1 : kRowAlign, kRowAlign, /*tile_ranges=*/packed);
    const int64_t P = rb.rows_bound;
    const int64_t tail_rows = packed ? kRowAlign - 1 : 0;  // rows the last tile reads past the last expert (packed)
    // (P, H) down projection, weighted: bf16 rows in a bf16 call (each weighted term rounded once, as the reference
    // rounds its expert outputs; half the bytes of the down GEMM's store and the combine's read), else f32 rows.
    // MOEX_Y_F32=1 keeps f32 rows in bf16 too (the earlier form, for the A/B).
    const bool y_f32 = a.dtype != DType::kBF16 || env_is("MOEX_Y_F32", "1");
    // The gathered x rows (P, H) are dead once the up GEMM has run, so the down GEMM's rows take their buffer (the
    // kernels run in stream order; none of them is launched as a programmatic dependent): one (P, H) buffer fewer.
    const size_t y_esize = y_f32 ? sizeof(float) : size_t(esize);
    const size_t x_rows = ws.reserve(size_t(P) * size_t(a.H) * std::max(size_t(esize), y_esize));  // x, then y
    const size_t y_rows = x_rows;
    const size_t row_scale = ws.reserve_n<float>(P);                      // (P,) routing weight of each row
    const size_t h_rows = ws.reserve(size_t(P) * size_t(a.I) * esize);    // (P, I) hidden activation
    const size_t u_rows = a.has_gate ? 0 : ws.reserve_n<float>(P * a.I);  // ungated: (P, I) f32 pre-activation
    const bool codes = activation_codes(a);  // quantized activations as codes + per-slice scales
    const size_t x_scales = codes ? ws.reserve_n<float>(P * act_slices(a, true)) : 0;
    const size_t h_scales = codes ? ws.reserve_n<float>(P * act_slices(a, false)) : 0;
    // FP8 weights with quantized activations: e4m3 bytes of x and h for the sm_90a FP8 kernel, when it takes both.
    const bool fp8_candidate = codes && a.gate_up_scales.format == QuantFormat::kFp8;
    const size_t x8_rows = fp8_candidate ? ws.reserve(size_t(P) * size_t(a.H)) : 0;
    const size_t h8_rows = fp8_candidate ? ws.reserve(size_t(P) * size_t(a.I)) : 0;
    ws.allocate();

    const RoutingArgs r = rb.args(ws, a.top_k_index, a.ids_i64);
    GroupedGemmArgs up{.A = ws.at<void>(x_rows),
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
                       .b_scales = a.gate_up_scales,
                       .a_scales = codes ? ws.at<float>(x_scales) : nullptr,
                       .a_fp8 = false,
                       .expert_scale = options.up_expert_scale,
                       .m_tile_row0 = packed ? r.tile_row0 : nullptr,
                       .expert_tile_start = r.expert_tile_start};
    GroupedGemmArgs down = up;
    down.A = ws.at<void>(h_rows), down.B = a.down_proj, down.D = ws.at<void>(y_rows), down.bias = a.down_bias;
    down.row_scale = ws.at<float>(row_scale), down.N = a.H, down.K = a.I, down.d_f32 = y_f32;
    down.epilogue = Epilogue::kStore, down.b_scales = a.down_scales;
    down.a_scales = codes ? ws.at<float>(h_scales) : nullptr;
    down.expert_scale = options.down_expert_scale;
    if (save) up.epilogue = Epilogue::kGateSave, up.save = a.saved_gate_up;
    bool fused_h_quant = false;  // the up GEMM's gate epilogue writes h as e4m3 codes and their scales
    if (fp8_candidate) {         // both GEMMs on e4m3 bytes, or both on codes in the dtype
        GroupedGemmArgs up8 = up, down8 = down;
        up8.A = ws.at<void>(x8_rows), down8.A = ws.at<void>(h8_rows);
        up8.a_fp8 = down8.a_fp8 = true;
        if (sm90_only || (grouped_gemm_takes_fp8(up8) && grouped_gemm_takes_fp8(down8))) up = up8, down = down8;
        // Dynamic groups of 128 along I: one up tile's 128 outputs are one group, so the epilogue quantizes h.
        GroupedGemmArgs up_codes = up8;
        up_codes.epilogue = Epilogue::kGateE4m3;
        up_codes.D = ws.at<void>(h8_rows);
        up_codes.d_scales = ws.at<float>(h_scales);
        fused_h_quant = up.a_fp8 && a.has_gate && a.act_quant.mode == ActivationQuant::kDynamic &&
                        act_group(a, false) == 128 && !env_is("MOEX_FUSED_H_QUANT", "0") &&
                        grouped_gemm_takes_fp8(up_codes);
        if (fused_h_quant) up = up_codes;
    }
    // The TMA kernels only: a projection they refuse fails here, before anything is launched.
    auto launch_gemm = [&](const GroupedGemmArgs& g) {
        if (!sm90_only) return launch_grouped_gemm(g, stream);
        MOEX_REQUIRE(launch_grouped_gemm_sm90(g, stream), ErrorCode::kUnsupported, "unreachable: checked above");
    };
    if (sm90_only) {
        for (const GroupedGemmArgs* g : {&up, &down}) {
            const char* why = sm90_refusal(*g);
            MOEX_REQUIRE(why == nullptr, ErrorCode::kUnsupported,
                         std::string("deepgemm: the sm_90a TMA grouped GEMM cannot run the ") +
                             (g == &up ? "up" : "down") + " projection: " + (why ? why : "") +
                             " (grouped_mm runs it on its portable kernel)");
        }
    }

    launch_routing(r, stream);
    if (save)
        CUDA_CHECK(cudaMemcpyAsync(a.saved_slot_row, r.slot_row, size_t(S) * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                                   stream));
    GatherArgs gather = gather_args(a, r, ws.at<void>(x_rows), ws.at<float>(row_scale), P);
    gather.tail_rows = tail_rows;
    // The FP8 kernel's e4m3 x straight from the token rows (one pass, no (P, H) rows in the dtype), when it can.
    const bool fused_x_quant =
        up.a_fp8 && gather_act_quant_takes(gather, act_group(a, true), a.act_quant.mode == ActivationQuant::kStatic);
    if (fused_x_quant)
        launch_gather_act_quant(
            GatherQuantArgs{gather, static_cast<uint8_t*>(const_cast<void*>(up.A)), ws.at<float>(x_scales)}, stream);
    else
        launch_gather_rows(gather, stream);
    // Quantized activations: the gathered rows and later h rounded (in place, or into e4m3 bytes for the FP8
    // kernel), each row by its tile's expert.
    auto quantize_rows = [&](bool is_up, void* rows, const GroupedGemmArgs& gemm) {
        ActQuantArgs q = act_quant_args(a, is_up, rows, const_cast<void*>(gemm.A), P, 1);  // workspace: ours
        if (packed) {
            q.ids = a.top_k_index, q.row_slot = r.row_slot, q.total_rows = r.expert_row_start + a.E;
        } else {
            q.tile_expert = r.tile_expert, q.num_tiles = r.num_tiles, q.tile_rows = kRowAlign;
        }
        if (codes) q.scale_out = ws.at<float>(is_up ? x_scales : h_scales);
        q.dst_e4m3 = gemm.a_fp8;
        launch_act_quant(q, stream);
    };
    if (quantizes_activations(a) && !fused_x_quant) quantize_rows(true, ws.at<void>(x_rows), up);
    launch_gemm(up);

    if (!a.has_gate) {  // the GEMM contract has no "act only" epilogue: activation in one row-wise pass
        HiddenActArgs act = hidden_act_args(a, r, ws.at<float>(u_rows), ws.at<void>(h_rows), P, a.I, nullptr, false);
        act.tail_rows = tail_rows;
        launch_hidden_act(act, stream);
    }
    if (quantizes_activations(a) && !fused_h_quant) quantize_rows(false, ws.at<void>(h_rows), down);
    launch_gemm(down);

    launch_combine(combine_args(a, ws.at<void>(y_rows), r.slot_row, /*weighted=*/false, y_f32), stream);
}

}  // namespace moex::cuda
