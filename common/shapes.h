// The one shape table of moex: routed-expert sizes of real MoE models, shared by the tests and the benchmark.
// Header-only and dependency-free (the benchmark includes it as "common/shapes.h"). Letters: H hidden,
// I intermediate (per half when gated), E experts, k top-k.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace moex::shapes {

struct ExpertsShape {
    std::string_view name;
    int64_t H, I, E, k;
    int64_t factor = 1;  // 1: the model's own size; > 1: scaled() down for tests
};

// The routed experts of each model (shared experts are a plain MLP and not part of the experts call).
inline constexpr std::array<ExpertsShape, 4> kModelShapes = {{
    {"qwen1.5-moe-a2.7b", 2048, 1408, 60, 4},
    {"qwen3-30b-a3b", 2048, 768, 128, 8},
    {"mixtral-8x7b", 4096, 14336, 8, 2},
    {"deepseek-v3", 7168, 2048, 256, 8},
}};

// Token counts for the benchmark: decode (1, 8), small and large prefill.
inline constexpr std::array<int64_t, 6> kBenchTokens = {1, 8, 64, 512, 1024, 4096};

// A test-sized copy: H and I divided by `factor` (at least 1), E capped at max_experts, k capped at E.
// A factor that is not a power of two gives sizes that are not multiples of 8 (2048 / 55 = 37, 1408 / 55 = 25),
// which is what exercises the kernels' tail paths.
constexpr ExpertsShape scaled(const ExpertsShape& s, int64_t factor, int64_t max_experts = 16) {
    ExpertsShape r = s;
    r.H = s.H / factor > 0 ? s.H / factor : 1;
    r.I = s.I / factor > 0 ? s.I / factor : 1;
    r.E = s.E < max_experts ? s.E : max_experts;
    r.k = s.k < r.E ? s.k : r.E;
    r.factor = s.factor * factor;
    return r;
}

// The shapes every backend is tested on: each model divided by 32 (H, I multiples of 8: the vector paths) and by
// 55 (odd sizes: the tails), plus one hand-made odd shape. Largest: mixtral / 32 = H 128, I 448.
inline constexpr std::array<ExpertsShape, 9> kTestShapes = {{
    scaled(kModelShapes[0], 32),
    scaled(kModelShapes[1], 32),
    scaled(kModelShapes[2], 32),
    scaled(kModelShapes[3], 32),
    scaled(kModelShapes[0], 55),
    scaled(kModelShapes[1], 55),
    scaled(kModelShapes[2], 55),
    scaled(kModelShapes[3], 55),
    {"odd", 37, 19, 6, 3, 1},
}};

// The configurations SonicMoE publishes its H100 figures on (../shared/perf/anchors.md §4; issue #14 item 5), for
// `moex bench --shapes sonicmoe-coarse` beside the peer run of bench/peers/sonicmoe_train.py. Not in the default set.
inline constexpr std::array<ExpertsShape, 2> kPeerShapes = {{
    {"sonicmoe-coarse", 4096, 2048, 64, 4},  // published at T = 32768
    {"sonicmoe-7b", 1536, 256, 128, 8},      // the fine-grained 7B configuration, published at T = 24576
}};

}  // namespace moex::shapes
