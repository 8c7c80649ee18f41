// The batched_mm pipeline (decode): device routing -> up projection with the gate fused -> down projection with
// bias, routing weight and the deterministic combine fused. 3 launches for T*k <= 4096, no host sync. With
// MOEX_DECODE_STREAM=1, the calls decode_stream_fits takes (T <= 16, 16-bit weights) run the one-kernel path of
// decode_stream.cu instead.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "cuda/common/align.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/env.h"
#include "cuda/common/pdl.cuh"
#include "cuda/common/quant.cuh"
#include "cuda/experts/batched.cuh"
#include "cuda/experts/pipelines.h"

namespace moex::cuda {
namespace batched {

namespace {
// A tuning override from the environment: 1, 2, 4 or 8, else 0 (unset or anything else).
int env_override(const char* name) {
    const char* env = std::getenv(name);
    const int v = env != nullptr ? std::atoi(env) : 0;
    return v == 1 || v == 2 || v == 4 || v == 8 ? v : 0;
}
}  // namespace

int choose_nt(int64_t T, int64_t k, int64_t E) {
    if (const int v = env_override("MOEX_BATCHED_NT")) return v;
    // An expert's rows under uniform routing: Binomial(T, k / E). Cover their mean + 4 sd (and never more than T):
    // an expert with more rows takes another tile, which streams its weights again, but that is rare, and fewer
    // token groups leave the registers to the loads (8 groups spilled the quantized loops).
    const double p = std::min(1.0, double(k) / double(std::max<int64_t>(E, 1)));
    const double rows = std::min(double(T), double(T) * p + 4.0 * std::sqrt(double(T) * p * (1.0 - p)));
    for (int nt : {1, 2, 4})
        if (8.0 * nt >= rows) return nt;
    return 8;
}

int choose_ks(int64_t rows_per_expert, int64_t K, double experts_touched, int rt, int slots) {
    if (const int v = env_override("MOEX_BATCHED_KS")) return v;
    // A streaming model of the projection: CTAs run in waves of `slots`; a wave of n CTAs moves n * bytes at
    // min(HBM, n * per-CTA rate) (a CTA keeps 32 KiB of loads in flight: ~25 GB/s at ~1.3 us loaded latency), and
    // each wave pays ~2 us of ramp-up and epilogue. Pick the K split with the smallest modelled time.
    constexpr double kHbm = 4.0e12, kCtaRate = 25e9, kWaveOverhead = 2e-6;
    int best = 1;
    double best_t = 1e30;
    for (int ks : {1, 2, 4, 8}) {
        const int bw = 16 * rt * (8 / ks);
        if (ks > 1 && double(K) / ks < 128) continue;  // too little K per warp: prologue/epilogue dominate
        const double ctas = std::ceil(experts_touched) * double(ceil_div(rows_per_expert, bw));
        const double bytes = double(bw) * double(K) * 2.0;
        const double full = std::floor(ctas / slots), rem = ctas - full * slots;
        double t = full * (slots * bytes / std::min(kHbm, slots * kCtaRate) + kWaveOverhead);
        if (rem > 0) t += rem * bytes / std::min(kHbm, rem * kCtaRate) + kWaveOverhead;
        if (t < best_t * (1 - 1e-6)) best = ks, best_t = t;
    }
    return best;
}

ProjConfig make_config(Loop loop, int nt, int ks, int esize) {
    ProjConfig c{loop, 1, 1, ks, 64, 0};
    if (loop == Loop::kMma) {
        c.nt = nt;
        c.rt = nt <= 4 ? 2 : 1;
        c.bw = 16 * c.rt * (8 / ks);
        c.smem = size_t(8 * 16 * c.rt) * size_t(8 * nt + 1) * sizeof(float);
    } else if (loop == Loop::kVecN) {
        c.ks = 8;
        c.bw = 32 * (16 / esize);
        c.smem = size_t(8) * c.bw * 9 * sizeof(float);
    } else {
        c.ks = 4;
        c.bw = 64;
        c.smem = size_t(4) * c.bw * 9 * sizeof(float);
    }
    return c;
}

}  // namespace batched

namespace {

using batched::Loop;
using batched::Proj;
using batched::ProjArgs;
using batched::ProjConfig;

// MOEX_BATCHED_DEEP=0: the 8-loads-per-thread loop for unquantized 16-bit weights at <= 16 token rows too (A/B).
bool deep_loads() {
    static const bool on = !env_is("MOEX_BATCHED_DEEP", "0");
    return on;
}

template <class T, Loop kLoop, int RT, int NT, int V, bool kQuant, bool kF8 = false>
void launch_kernel(const ProjArgs& a, const ProjConfig& c, dim3 grid, cudaStream_t stream) {
    // Unquantized 16-bit weights and at most 16 token rows per tile: 16 weight loads in flight per thread. (e4m3
    // weights on the FP8 MMAs measured slower with them, and with the next step's loads issued under this step's
    // MMAs: RESULTS AA.)
    constexpr bool kDeepable = kLoop == Loop::kMma && !kQuant && NT <= 2 && sizeof(T) == 2;
    auto kernel = kDeepable && deep_loads() ? batched::batched_proj_kernel<T, kLoop, RT, NT, V, kQuant, kF8, kDeepable>
                                            : batched::batched_proj_kernel<T, kLoop, RT, NT, V, kQuant, kF8>;
    allow_dynamic_smem(kernel, c.smem);
    // Programmatic dependent launch hides the launch gap between the chain's kernels (pdl.cuh).
    launch_pdl(kernel, grid, dim3(batched::kThreads), c.smem, stream, a);
}

// kMma: V 16-byte vectors per thread and k step (quantized codes: V = 2 for e4m3, 4 for e2m1 when K and the
// promotion slice allow, so that each load is 16 bytes as in the bf16 loop; kF8: e4m3 activations too, FP8 MMAs).
template <class T, bool kQuant, int V, bool kF8 = false>
void launch_mma(const ProjArgs& a, const ProjConfig& c, dim3 grid, cudaStream_t s) {
    switch (c.nt) {
        case 1: return launch_kernel<T, Loop::kMma, 2, 1, V, kQuant, kF8>(a, c, grid, s);
        case 2: return launch_kernel<T, Loop::kMma, 2, 2, V, kQuant, kF8>(a, c, grid, s);
        case 4: return launch_kernel<T, Loop::kMma, 2, 4, V, kQuant, kF8>(a, c, grid, s);
        default: return launch_kernel<T, Loop::kMma, 1, 8, V, kQuant, kF8>(a, c, grid, s);
    }
}

int quant_vectors(const WeightScales& s, int64_t K) {
    if (s.format == QuantFormat::kFp8) return K % 64 == 0 && promotion_group(s, K) % 64 == 0 ? 2 : 1;
    // e2m1: a 16-byte load holds 32 codes, one mxfp4 scale byte or two nvfp4 ones (read as one aligned uint16).
    const bool scales_aligned = s.format != QuantFormat::kNvfp4 || reinterpret_cast<uintptr_t>(s.data) % 2 == 0;
    return K % 128 == 0 && scales_aligned ? 4 : 1;
}

template <class T, bool kQuant>
void launch_proj_as(const ProjArgs& a, const ProjConfig& c, dim3 grid, cudaStream_t s) {
    constexpr int V = 16 / int(sizeof(T));
    if (c.loop == Loop::kVecN && !kQuant) return launch_kernel<T, Loop::kVecN, 1, 1, V, false>(a, c, grid, s);
    if (c.loop == Loop::kGeneric) return launch_kernel<T, Loop::kGeneric, 1, 1, 1, kQuant>(a, c, grid, s);
    if constexpr (sizeof(T) == 2) {
        if (c.loop == Loop::kMma) {
            if constexpr (kQuant) {
                if (a.x_e4m3) return launch_mma<T, true, 2, true>(a, c, grid, s);  // the pipeline checked fp8_mma
                switch (quant_vectors(a.scales, a.K)) {
                    case 2: return launch_mma<T, true, 2>(a, c, grid, s);
                    case 4: return launch_mma<T, true, 4>(a, c, grid, s);
                    default: return launch_mma<T, true, 1>(a, c, grid, s);
                }
            }
            return launch_mma<T, kQuant, 1>(a, c, grid, s);
        }
    }
    fail(ErrorCode::kInvalidArgument,
         "batched_mm: no main loop for this projection (the mma loop needs bf16 or f16, "
         "quantized weights are K-major)");
}

template <class T>
void launch_proj_typed(const ProjArgs& a, const ProjConfig& c, dim3 grid, cudaStream_t s) {
    if (a.scales.format != QuantFormat::kNone) return launch_proj_as<T, true>(a, c, grid, s);
    launch_proj_as<T, false>(a, c, grid, s);
}

// Grid: x = tiles (bounded on the host), y = column blocks of the projection's output.
void launch_proj(const ProjArgs& a, const ProjConfig& c, int64_t tiles_bound, DType dt, cudaStream_t s) {
    const bool gate = a.proj == Proj::kUpGate;
    const int64_t cols = gate ? ceil_div(a.out_cols, c.bw / 2) : ceil_div(a.R, c.bw);
    MOEX_REQUIRE(cols <= 65535 && tiles_bound < (int64_t(1) << 31) && a.R < (int64_t(1) << 31), ErrorCode::kUnsupported,
                 "batched_mm: projection too large for one grid");
    const dim3 grid{unsigned(tiles_bound), unsigned(cols), 1};
    switch (dt) {
        case DType::kBF16: return launch_proj_typed<__nv_bfloat16>(a, c, grid, s);
        case DType::kF16: return launch_proj_typed<__half>(a, c, grid, s);
        case DType::kF32: return launch_proj_typed<float>(a, c, grid, s);
        default: fail(ErrorCode::kInvalidArgument, "batched_mm: activations must be bf16, f16 or f32");
    }
}

// Which main loop a projection can use: W (E, R, K) K-major or (E, K, R) n-major, X rows of K elements.
Loop pick_loop(DType dt, bool n_major, int64_t R, int64_t K, bool gate_concat, const void* W, const void* X) {
    const int64_t V = 16 / dtype_size(dt);
    if (!n_major && dt != DType::kF32 && K % 8 == 0 && is_aligned16(W) && is_aligned16(X)) return Loop::kMma;
    if (n_major && R % V == 0 && (!gate_concat || (R / 2) % V == 0) && is_aligned16(W)) return Loop::kVecN;
    return Loop::kGeneric;
}

// FP8 weights with e4m3 activations on the FP8 MMAs: K-major mma loop with 16-code loads (quant_vectors 2);
// MOEX_BATCHED_FP8_MMA=0 keeps the 16-bit MMAs on decoded codes (A/B timing).
bool fp8_mma(const WeightScales& w, Loop loop, int64_t K) {
    static const bool enabled = !env_is("MOEX_BATCHED_FP8_MMA", "0");
    return enabled && w.format == QuantFormat::kFp8 && loop == Loop::kMma && quant_vectors(w, K) == 2;
}

}  // namespace

void run_batched(const ExpertsArgs& a, cudaStream_t stream) {
    if (decode_stream_fits(a)) return run_decode_stream(a, stream);
    const int64_t S = a.T * a.k, N = up_width(a), E = a.E, esize = dtype_size(a.dtype);
    const bool gate_concat = a.has_gate && a.gate.concatenated;
    const Loop up_loop = pick_loop(a.dtype, a.is_transposed, N, a.H, gate_concat, a.gate_up_proj, a.hidden_states);
    const Loop down_loop =
        pick_loop(a.dtype, a.is_transposed, a.H, a.I, false, a.down_proj, a.down_proj /*h: aligned*/);
    // Both projections walk the same tiles, so they share the chunk size (8 * nt rows).
    const int nt = up_loop == Loop::kMma && down_loop == Loop::kMma ? batched::choose_nt(a.T, a.k, a.E) : 1;
    const int mc = 8 * nt;
    const int slots = 2 * device_state().sm_count;                     // 2 CTAs of 256 threads per SM
    const double miss = std::max(0.0, 1.0 - double(a.k) / double(E));  // P(an expert misses one token)
    const double touched = std::min(double(std::min(E, S)), double(E) * (1.0 - std::pow(miss, double(a.T))));
    const double tiles_est = std::max(touched, double(S) / mc);
    const int rt = nt <= 4 ? 2 : 1;
    const int ks_up = up_loop == Loop::kMma ? batched::choose_ks(N, a.H, tiles_est, rt, slots) : 1;
    const int ks_down = down_loop == Loop::kMma ? batched::choose_ks(a.H, a.I, tiles_est, rt, slots) : 1;
    const ProjConfig cu = batched::make_config(up_loop, nt, ks_up, int(esize));
    const ProjConfig cd = batched::make_config(down_loop, nt, ks_down, int(esize));
    const int64_t down_cols = ceil_div(a.H, cd.bw);
    const bool fused_combine = S <= 4096;

    Workspace ws(stream);
    // The routing kernel zeroes the down projection's per-column-block arrival counters (fused combine).
    const RoutingBuffers rb =
        reserve_routing(ws, S, E, 1, mc, /*tile_ranges=*/true, fused_combine ? int32_t(down_cols) : 0);
    const size_t h_rows = ws.reserve(size_t(S) * size_t(a.I) * esize);  // (S, I) hidden activation
    const size_t y_rows = ws.reserve_n<float>(S * a.H);                 // (S, H) f32 weighted down projection
    // Quantized activations: x rounded per token (dynamic) or per slot with its expert's scale (static).
    const bool quant_x = quantizes_activations(a), per_slot = a.act_quant.mode == ActivationQuant::kStatic;
    const int64_t x_rows = per_slot ? S : a.T;
    const bool codes = activation_codes(a);  // 16-bit kernels: codes + per-slice scales
    // FP8 weights whose projection runs the mma loop with 16-code loads take e4m3 activation bytes (FP8 MMAs).
    const bool f8_up = codes && fp8_mma(a.gate_up_scales, up_loop, a.H);
    const bool f8_down = codes && fp8_mma(a.down_scales, down_loop, a.I);
    const size_t x_quant = quant_x ? ws.reserve(size_t(x_rows) * size_t(a.H) * (f8_up ? 1 : esize)) : 0;
    const size_t h_e4m3 = f8_down ? ws.reserve(size_t(S) * size_t(a.I)) : 0;  // h as codes for the down MMAs
    const size_t x_scales = codes ? ws.reserve_n<float>(x_rows * act_slices(a, true)) : 0;
    const size_t h_scales = codes ? ws.reserve_n<float>(S * act_slices(a, false)) : 0;
    ws.allocate();

    const RoutingArgs r = rb.args(ws, a.top_k_index, a.ids_i64);
    launch_routing(r, stream);
    if (quant_x) {
        ActQuantArgs q = act_quant_args(a, true, a.hidden_states, ws.at<void>(x_quant), x_rows, per_slot ? a.k : 1);
        if (per_slot) q.ids = a.top_k_index;
        if (codes) q.scale_out = ws.at<float>(x_scales);
        q.dst_e4m3 = f8_up;
        launch_act_quant(q, stream);
    }

    const ProjArgs up{.W = a.gate_up_proj,
                      .bias = a.gate_up_bias,
                      .X = quant_x ? ws.at<void>(x_quant) : a.hidden_states,
                      .out = ws.at<void>(h_rows),
                      .row_slot = r.row_slot,
                      .tile_expert = r.tile_expert,
                      .tile_row0 = r.tile_row0,
                      .tile_nrows = r.tile_nrows,
                      .num_tiles = r.num_tiles,
                      .R = N,
                      .K = a.H,
                      .E = E,
                      .out_cols = a.I,
                      .x_div = quant_x && per_slot ? 1 : a.k,
                      .proj = a.has_gate ? Proj::kUpGate : Proj::kUpAct,
                      .n_major = a.is_transposed,
                      .gate = a.gate,
                      .weights = nullptr,
                      .weights_f32 = false,
                      .dtype = a.dtype,
                      .scales = a.gate_up_scales,
                      .x_scales = codes ? ws.at<float>(x_scales) : nullptr,
                      .arrive = nullptr,
                      .final_out = nullptr,
                      .ids = nullptr,
                      .ids_i64 = false,
                      .T = 0,
                      .k = 0,
                      .ks = cu.ks,
                      .x_e4m3 = f8_up};
    launch_proj(up, cu, rb.tiles_bound, a.dtype, stream);
    if (quant_x) {  // h (S, I) rounded (in place, or into e4m3 bytes), each slot row with its expert (sentinel
                    // slots are never written)
        void* h_dst = f8_down ? ws.at<void>(h_e4m3) : ws.at<void>(h_rows);
        ActQuantArgs q = act_quant_args(a, false, ws.at<void>(h_rows), h_dst, S, 1);
        q.ids = a.top_k_index;
        if (codes) q.scale_out = ws.at<float>(h_scales);
        q.dst_e4m3 = f8_down;
        launch_act_quant(q, stream);
    }

    ProjArgs down = up;
    down.W = a.down_proj, down.bias = a.down_bias, down.out = ws.at<void>(y_rows);
    down.X = f8_down ? ws.at<void>(h_e4m3) : ws.at<void>(h_rows), down.x_e4m3 = f8_down;
    down.R = a.H, down.K = a.I, down.out_cols = a.H, down.x_div = 1, down.proj = Proj::kDown;
    down.weights = a.top_k_weights, down.weights_f32 = a.weights_f32, down.ks = cd.ks, down.scales = a.down_scales;
    down.x_scales = codes ? ws.at<float>(h_scales) : nullptr;
    down.arrive = r.zero;  // nullptr without the fused combine
    down.final_out = a.out, down.ids = a.top_k_index, down.ids_i64 = a.ids_i64, down.T = a.T, down.k = a.k;
    launch_proj(down, cd, rb.tiles_bound, a.dtype, stream);

    if (!fused_combine) {
        launch_combine(combine_args(a, ws.at<float>(y_rows), nullptr, /*weighted=*/false), stream);
    }
}

}  // namespace moex::cuda
