// Shared by moex_ep_check and moex_ep_bench: the EP group of this process (NCCL from the launcher's environment,
// else R in-memory ranks as threads on the CPU), and a random experts problem that every rank draws identically.
#pragma once

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/random_data.h"
#include "moex/ep.h"
#include "moex/error.h"

namespace moex::ep_tools {

// Host tensors of one full problem (all T tokens, all E experts); the same bytes on every rank for a seed.
struct FullProblem {
    Tensor x, ids, w, up, down;  // (T, H), (T, k) i32, (T, k) f32, (E, 2I, H), (E, H, I)
    ExpertsProblem problem;
};

// Weights are only drawn when `draw_weights` (the benchmark fills them on the device instead: ~5.6G values).
// Data from common/random_data.h: uniform values of std 1 (x), 1/sqrt(H) and 1/sqrt(I) (weights), uniform routing.
inline FullProblem make_full_problem(int64_t T, int64_t H, int64_t I, int64_t E, int64_t k, DType dt, uint64_t seed,
                                     bool draw_weights = true) {
    using common::Distribution;
    using common::mix_seed;
    FullProblem f;
    f.x = Tensor(dt, {T, H});
    f.ids = Tensor(DType::kI32, {T, k});
    f.w = Tensor(DType::kF32, {T, k});
    common::fill_random(f.x.view(), 1.0, mix_seed(seed, 1), Distribution::kUniform);
    common::random_routing(f.ids.view(), f.w.view(), E, mix_seed(seed, 2));
    if (draw_weights) {
        f.up = Tensor(dt, {E, 2 * I, H});
        f.down = Tensor(dt, {E, H, I});
        common::fill_random(f.up.view(), 1.0 / std::sqrt(double(H)), mix_seed(seed, 3), Distribution::kUniform);
        common::fill_random(f.down.view(), 1.0 / std::sqrt(double(I)), mix_seed(seed, 4), Distribution::kUniform);
    }
    f.problem.hidden_states = f.x.view();
    f.problem.top_k_index = f.ids.view();
    f.problem.top_k_weights = f.w.view();
    f.problem.gate_up_proj = f.up.view();
    f.problem.down_proj = f.down.view();
    return f;
}

// Rows [t0, t1) of a (T, ...) view.
inline TensorView rows_of(TensorView v, int64_t t0, int64_t t1) {
    v.data = static_cast<char*>(v.data) + t0 * v.strides[0] * dtype_size(v.dtype);
    v.shape[0] = t1 - t0;
    return v;
}

// Max over ranks of a host value (through the transport's count exchange).
inline double max_over_ranks(Transport& tr, double v) {
    std::vector<int64_t> s(size_t(tr.size())), r(size_t(tr.size()));
    int64_t bits;
    std::memcpy(&bits, &v, 8);  // non-negative doubles order like their bit patterns
    for (auto& x : s) x = bits;
    tr.exchange_counts(s.data(), r.data());
    double m = 0;
    for (int64_t b : r) {
        double d;
        std::memcpy(&d, &b, 8);
        m = d > m ? d : m;
    }
    return m;
}

inline bool launched_by_ep_launch() { return std::getenv("WORLD_SIZE") != nullptr; }

}  // namespace moex::ep_tools
