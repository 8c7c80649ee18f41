// The three CPU experts algorithms. They share the passes (routing, up, down, combine) and differ in schedule:
// eager runs hit experts one after another, batched_mm GEMV-exact products per (token, slot), grouped_mm all
// experts at once with the packed GEMM for large groups.
#include "src/cpu/experts_cpu.h"

#include "src/cpu/act_quant.h"
#include "src/cpu/combine.h"
#include "src/cpu/config.h"
#include "src/cpu/expert_mlp.h"

namespace moex::cpu {
namespace {

enum class Schedule { kEager, kBatched, kGrouped };

// Scratch of the calling thread, kept between calls: a pass needs up to 512 MiB (config.h token_chunk), and
// first-touch page faults on a fresh buffer would cost ~5% of a prefill call.
struct Workspace {
    FloatBuffer x, xq, xs, h, hs, y;  // xs, hs: the scales of quantized activations
};

void run(const ExpertsProblem& p, const TensorView& out, int num_threads, Schedule schedule) {
    const CpuProblem cp = unpack_problem(p);
    const int threads = resolve_threads(num_threads);
    thread_local Workspace ws;
    const int64_t xq = cp.act_quant == ActivationQuant::kDynamic  ? cp.H
                       : cp.act_quant == ActivationQuant::kStatic ? cp.k * cp.H
                                                                  : 0;
    const int64_t chunk = token_chunk(cp.T, cp.k, cp.H, cp.I, xq);
    for (int64_t t0 = 0; t0 < cp.T; t0 += chunk) {
        const int64_t t1 = cp.T - t0 < chunk ? cp.T : t0 + chunk;
        const float* x = x_as_f32(cp, t0, t1, ws.x, threads);
        const Routing r = schedule == Schedule::kBatched
                              ? route_by_slot(cp, t0, t1, batched_group_rows(cp.p->is_transposed))
                              : route_by_expert(cp, t0, t1);
        // Quantized activations: the up projection reads x rounded per token (dynamic) or per routed row (static).
        UpInput in{x, false, {}};
        if (cp.act_quant == ActivationQuant::kDynamic) {
            const ActRows q = quantize_tokens(cp, x, t1 - t0, ws.xq, ws.xs, threads);
            in = {q.x, false, q.scales};
        }
        if (cp.act_quant == ActivationQuant::kStatic) {
            const ActRows q = quantize_routed_rows(cp, r, x, ws.xq, ws.xs, threads);
            in = {q.x, true, q.scales};
        }
        float* h = ws.h.get(r.rows() * cp.I);  // (rows, I)
        float* y = ws.y.get(r.rows() * cp.H);  // (rows, H)
        auto pass = [&](int64_t g0, int64_t g1) {
            run_up(cp, r, g0, g1, in, h, threads);
            ActScales hs;
            if (cp.act_quant != ActivationQuant::kNone) hs = quantize_hidden(cp, r, g0, g1, h, ws.hs, threads);
            run_down(cp, r, g0, g1, h, hs, y, threads);
        };
        if (schedule == Schedule::kEager) {
            for (int64_t g = 0; g < r.groups(); ++g) pass(g, g + 1);
        } else {
            pass(0, r.groups());
        }
        combine(cp, r, t0, t1, y, out.data, threads);
    }
}

}  // namespace

void run_eager(const ExpertsProblem& p, const TensorView& out, int num_threads) {
    run(p, out, num_threads, Schedule::kEager);
}

void run_batched(const ExpertsProblem& p, const TensorView& out, int num_threads) {
    run(p, out, num_threads, Schedule::kBatched);
}

void run_grouped(const ExpertsProblem& p, const TensorView& out, int num_threads) {
    run(p, out, num_threads, Schedule::kGrouped);
}

}  // namespace moex::cpu
