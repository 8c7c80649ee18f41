// The batched_mm pipeline (decode): device routing -> up projection with the gate fused -> down projection with
// bias, routing weight and the deterministic combine fused. 3 launches for T*k <= 4096, no host sync.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/experts/batched.cuh"
#include "cuda/experts/elementwise.h"
#include "cuda/experts/pipelines.h"
#include "cuda/routing/routing.h"

namespace moex::cuda {
namespace batched {

int choose_nt(int64_t T) {
    if (T <= 8) return 1;
    if (T <= 16) return 2;
    if (T <= 32) return 4;
    return 8;
}

int choose_ks(int64_t rows_per_expert, int64_t K, double experts_touched, int rt, int slots) {
    if (const char* env = std::getenv("MOEX_BATCHED_KS")) {  // tuning override: 1, 2, 4 or 8
        const int v = std::atoi(env);
        if (v == 1 || v == 2 || v == 4 || v == 8) return v;
    }
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

// Programmatic dependent launch (sm_90): the projection grid is scheduled while the kernel before it drains and
// waits in griddepcontrol.wait, hiding the launch gap between the 3 kernels. MOEX_PDL=0 turns it off.
bool use_pdl() {
    const char* v = std::getenv("MOEX_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
}

template <class T, Loop kLoop, int RT, int NT, int V>
void launch_kernel(const ProjArgs& a, const ProjConfig& c, dim3 grid, cudaStream_t stream) {
    auto kernel = batched::batched_proj_kernel<T, kLoop, RT, NT, V>;
    allow_dynamic_smem(kernel, c.smem);
    if (!use_pdl()) {
        kernel<<<grid, batched::kThreads, c.smem, stream>>>(a);
        MOEX_LAUNCH_CHECK();
        return;
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(batched::kThreads, 1, 1);
    cfg.dynamicSmemBytes = c.smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, a));
}

template <class T>
void launch_proj_typed(const ProjArgs& a, const ProjConfig& c, dim3 grid, cudaStream_t s) {
    constexpr int V = 16 / int(sizeof(T));
    if (c.loop == Loop::kVecN) return launch_kernel<T, Loop::kVecN, 1, 1, V>(a, c, grid, s);
    if (c.loop == Loop::kGeneric) return launch_kernel<T, Loop::kGeneric, 1, 1, 1>(a, c, grid, s);
    if constexpr (sizeof(T) == 2) {
        switch (c.nt) {
            case 1:
                return launch_kernel<T, Loop::kMma, 2, 1, 1>(a, c, grid, s);
            case 2:
                return launch_kernel<T, Loop::kMma, 2, 2, 1>(a, c, grid, s);
            case 4:
                return launch_kernel<T, Loop::kMma, 2, 4, 1>(a, c, grid, s);
            default:
                return launch_kernel<T, Loop::kMma, 1, 8, 1>(a, c, grid, s);
        }
    }
    fail(ErrorCode::kInvalidArgument, "batched_mm: the mma loop needs bf16 or f16");
}

// Grid: x = tiles (bounded on the host), y = column blocks of the projection's output.
void launch_proj(const ProjArgs& a, const ProjConfig& c, int64_t tiles_bound, ActDType dt, cudaStream_t s) {
    const bool gate = a.proj == Proj::kUpGate;
    const int64_t cols = gate ? ceil_div(a.out_cols, c.bw / 2) : ceil_div(a.R, c.bw);
    MOEX_REQUIRE(cols <= 65535 && tiles_bound < (int64_t(1) << 31), ErrorCode::kUnsupported,
                 "batched_mm: projection too large for one grid");
    const dim3 grid{unsigned(tiles_bound), unsigned(cols), 1};
    switch (dt) {
        case ActDType::kBF16:
            return launch_proj_typed<__nv_bfloat16>(a, c, grid, s);
        case ActDType::kF16:
            return launch_proj_typed<__half>(a, c, grid, s);
        case ActDType::kF32:
            return launch_proj_typed<float>(a, c, grid, s);
    }
}

// Which main loop a projection can use: W (E, R, K) K-major or (E, K, R) n-major, X rows of K elements.
Loop pick_loop(ActDType dt, bool n_major, int64_t R, int64_t K, bool gate_concat, const void* W, const void* X) {
    const int esize = act_size(dt), V = 16 / esize;
    if (!n_major && dt != ActDType::kF32 && K % 8 == 0 && is_aligned16(W) && is_aligned16(X)) return Loop::kMma;
    if (n_major && R % V == 0 && (!gate_concat || (R / 2) % V == 0) && is_aligned16(W)) return Loop::kVecN;
    return Loop::kGeneric;
}

}  // namespace

void run_batched(const ExpertsArgs& x, cudaStream_t stream) {
    const int64_t S = x.T * x.k, N = up_width(x), E = x.E;
    const int esize = act_size(x.dtype);
    const bool gate_concat = x.has_gate && x.is_concatenated;
    const Loop up_loop = pick_loop(x.dtype, x.is_transposed, N, x.H, gate_concat, x.w_up, x.x);
    const Loop down_loop = pick_loop(x.dtype, x.is_transposed, x.H, x.I, false, x.w_down, x.w_down /*h: aligned*/);
    // Both projections walk the same tiles, so they share the chunk size (8 * nt rows).
    const int nt = up_loop == Loop::kMma && down_loop == Loop::kMma ? batched::choose_nt(x.T) : 1;
    const int mc = 8 * nt;
    const int slots = 2 * current_device_info().sm_count;              // 2 CTAs of 256 threads per SM
    const double miss = std::max(0.0, 1.0 - double(x.k) / double(E));  // P(an expert misses one token)
    const double touched = std::min(double(std::min(E, S)), double(E) * (1.0 - std::pow(miss, double(x.T))));
    const double tiles_est = std::max(touched, double(S) / mc);
    const int rt = nt <= 4 ? 2 : 1;
    const int ks_up = up_loop == Loop::kMma ? batched::choose_ks(N, x.H, tiles_est, rt, slots) : 1;
    const int ks_down = down_loop == Loop::kMma ? batched::choose_ks(x.H, x.I, tiles_est, rt, slots) : 1;
    const ProjConfig cu = batched::make_config(up_loop, nt, ks_up, esize);
    const ProjConfig cd = batched::make_config(down_loop, nt, ks_down, esize);
    const int64_t tiles_bound = routing_tiles_bound(S, E, 1, mc);
    const int64_t down_cols = ceil_div(x.H, cd.bw);
    const bool fused_combine = S <= 4096;

    Workspace ws(stream);
    const size_t o_count = ws.reserve_n<int32_t>(E), o_start = ws.reserve_n<int32_t>(E + 1);
    const size_t o_te = ws.reserve_n<int32_t>(tiles_bound), o_t0 = ws.reserve_n<int32_t>(tiles_bound);
    const size_t o_tn = ws.reserve_n<int32_t>(tiles_bound), o_nt = ws.reserve_n<int32_t>(1);
    const size_t o_sr = ws.reserve_n<int32_t>(S), o_rs = ws.reserve_n<int32_t>(S);
    const size_t o_scr = ws.reserve_n<int32_t>(routing_scratch_ints(S, E));
    const size_t o_arr = ws.reserve_n<int32_t>(down_cols);
    const size_t o_h = ws.reserve(size_t(S) * size_t(x.I) * esize);
    const size_t o_y = ws.reserve_n<float>(S * x.H);
    ws.allocate();

    RoutingArgs r{};
    r.ids = x.ids, r.ids_i64 = x.ids_i64, r.S = S, r.E = E, r.align = 1, r.tile_rows = mc;
    r.expert_count = ws.at<int32_t>(o_count), r.expert_row_start = ws.at<int32_t>(o_start);
    r.tile_expert = ws.at<int32_t>(o_te), r.tile_row0 = ws.at<int32_t>(o_t0), r.tile_nrows = ws.at<int32_t>(o_tn);
    r.num_tiles = ws.at<int32_t>(o_nt), r.slot_row = ws.at<int32_t>(o_sr), r.row_slot = ws.at<int32_t>(o_rs);
    r.zero = fused_combine ? ws.at<int32_t>(o_arr) : nullptr, r.n_zero = fused_combine ? int32_t(down_cols) : 0;
    r.scratch = ws.at<int32_t>(o_scr);
    launch_routing(r, stream);

    ProjArgs up{};
    up.W = x.w_up, up.bias = x.b_up, up.X = x.x, up.out = ws.at<void>(o_h);
    up.row_slot = r.row_slot, up.tile_expert = r.tile_expert, up.tile_row0 = r.tile_row0;
    up.tile_nrows = r.tile_nrows, up.num_tiles = r.num_tiles;
    up.R = N, up.K = x.H, up.E = E, up.out_cols = x.I, up.x_div = x.k;
    up.proj = x.has_gate ? Proj::kUpGate : Proj::kUpAct;
    up.n_major = x.is_transposed, up.concatenated = x.is_concatenated;
    up.gp = GateParams{x.activation, x.gate_kind, x.swiglu_alpha, x.swiglu_limit};
    up.dtype = int32_t(x.dtype), up.ks = cu.ks;
    launch_proj(up, cu, tiles_bound, x.dtype, stream);

    ProjArgs down = up;
    down.W = x.w_down, down.bias = x.b_down, down.X = ws.at<void>(o_h), down.out = ws.at<void>(o_y);
    down.R = x.H, down.K = x.I, down.out_cols = x.H, down.x_div = 1;
    down.proj = Proj::kDown, down.concatenated = true;
    down.weights = x.topk_weights, down.weights_f32 = x.weights_f32, down.ks = cd.ks;
    down.arrive = fused_combine ? ws.at<int32_t>(o_arr) : nullptr;
    down.final_out = x.out, down.ids = x.ids, down.ids_i64 = x.ids_i64, down.T = x.T, down.k = x.k;
    launch_proj(down, cd, tiles_bound, x.dtype, stream);

    if (!fused_combine) {
        CombineArgs c{};
        c.Y = ws.at<float>(o_y), c.slot_row = nullptr, c.ids = x.ids, c.bias = nullptr, c.weights = nullptr;
        c.out = x.out, c.T = x.T, c.H = x.H, c.k = x.k, c.E = E, c.dtype = x.dtype, c.ids_i64 = x.ids_i64;
        launch_combine(c, stream);
    }
}

}  // namespace moex::cuda
