// Shared by moex_ep_check and moex_ep_bench: the EP group of this process (NCCL from the launcher's environment,
// else R in-memory ranks as threads on the CPU), and a random experts problem that every rank draws identically.
#pragma once

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "moex/ep.h"
#include "moex/error.h"

namespace moex::ep_tools {

// Host tensors of one full problem (all T tokens, all E experts); the same bytes on every rank for a seed.
struct FullProblem {
    Tensor x, ids, w, up, down;  // (T, H), (T, k) i32, (T, k) f32, (E, 2I, H), (E, H, I)
    ExpertsProblem problem;
};

inline void fill(const Tensor& t, std::mt19937_64& rng, float scale) {
    std::uniform_real_distribution<float> u(-scale, scale);
    const int64_t n = t.view().numel();
    for (int64_t i = 0; i < n; ++i) {
        const float v = u(rng);
        if (t.view().dtype == DType::kF32)
            static_cast<float*>(t.data())[i] = v;
        else
            static_cast<uint16_t*>(t.data())[i] = f32_to_bf16(v);
    }
}

// Weights are only drawn when `draw_weights` (the benchmark fills them on the device instead: ~5.6G values).
inline FullProblem make_full_problem(int64_t T, int64_t H, int64_t I, int64_t E, int64_t k, DType dt, uint64_t seed,
                                     bool draw_weights = true) {
    FullProblem f;
    std::mt19937_64 rng(seed);
    f.x = Tensor(dt, {T, H});
    f.ids = Tensor(DType::kI32, {T, k});
    f.w = Tensor(DType::kF32, {T, k});
    fill(f.x, rng, 1.0f);
    std::vector<int32_t> perm(static_cast<size_t>(E));
    for (int64_t t = 0; t < T; ++t) {  // k distinct experts per token, weights in (0.05, 1)
        for (int64_t e = 0; e < E; ++e) perm[size_t(e)] = int32_t(e);
        for (int64_t j = 0; j < k; ++j) {
            std::swap(perm[size_t(j)], perm[size_t(j + int64_t(rng() % uint64_t(E - j)))]);
            static_cast<int32_t*>(f.ids.data())[t * k + j] = perm[size_t(j)];
            static_cast<float*>(f.w.data())[t * k + j] = 0.05f + 0.95f * float(rng() % 1000) / 1000.0f;
        }
    }
    if (draw_weights) {
        f.up = Tensor(dt, {E, 2 * I, H});
        f.down = Tensor(dt, {E, H, I});
        fill(f.up, rng, 1.0f / std::sqrt(float(H)));
        fill(f.down, rng, 1.0f / std::sqrt(float(I)));
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
