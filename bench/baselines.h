// What `moex bench --device cuda` compares against (bench/RESULTS.md, "Baselines compiled into moex bench"): the
// best Hugging Face configuration per (shape, T), bf16, measured on the H200 (the floor's terms are measured in the
// run itself: cuda/common/peaks.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace moex::bench {

// The card kHfBest was measured on; `moex bench` shows it only on that card (another card's peers: the side-by-side
// scripts, bench/cuda_side_by_side.sh, which run them in the same call).
inline constexpr std::string_view kHfCard = "H200";
// Whether the baselines apply to the card named `device` (the CUDA device name; empty on the CPU).
constexpr bool hf_baselines_apply(std::string_view device) { return device.find(kHfCard) != std::string_view::npos; }

struct HfBaseline {
    std::string_view shape;
    int64_t T;
    double best_us;         // the fastest of eager / batched_mm / grouped_mm, plain, +graphs, +autotune
    std::string_view what;  // which configuration that was
};

inline constexpr HfBaseline kHfBest[] = {
    {"qwen1.5-moe-a2.7b", 1, 204, "grouped_mm+graphs"},
    {"qwen1.5-moe-a2.7b", 8, 434, "grouped_mm+graphs"},
    {"qwen1.5-moe-a2.7b", 64, 681, "grouped_mm"},
    {"qwen1.5-moe-a2.7b", 512, 860, "grouped_mm"},
    {"qwen1.5-moe-a2.7b", 4096, 1812, "grouped_mm"},
    {"qwen1.5-moe-a2.7b", 16384, 4860, "grouped_mm"},
    {"qwen3-30b-a3b", 1, 232, "batched_mm+graphs"},
    {"qwen3-30b-a3b", 8, 375, "grouped_mm+graphs"},
    {"qwen3-30b-a3b", 64, 728, "grouped_mm"},
    {"qwen3-30b-a3b", 512, 746, "grouped_mm"},
    {"qwen3-30b-a3b", 4096, 1143, "grouped_mm+autotune"},
    {"qwen3-30b-a3b", 16384, 3128, "grouped_mm+autotune"},
    {"mixtral-8x7b", 1, 452, "grouped_mm+graphs"},
    {"mixtral-8x7b", 8, 1194, "grouped_mm+graphs"},
    {"mixtral-8x7b", 64, 1345, "grouped_mm"},
    {"mixtral-8x7b", 512, 1887, "grouped_mm"},
    {"mixtral-8x7b", 4096, 4976, "grouped_mm+autotune"},
    {"mixtral-8x7b", 16384, 19003, "grouped_mm+autotune"},
    {"deepseek-v3", 1, 414, "grouped_mm+graphs"},
    {"deepseek-v3", 8, 1903, "grouped_mm+graphs"},
    {"deepseek-v3", 64, 6456, "grouped_mm"},
    {"deepseek-v3", 512, 7652, "grouped_mm"},
    {"deepseek-v3", 4096, 9013, "grouped_mm+autotune"},
    {"deepseek-v3", 16384, 22691, "grouped_mm+autotune"},
};

constexpr std::optional<HfBaseline> hf_best(std::string_view shape, int64_t T) {
    for (const auto& b : kHfBest)
        if (b.shape == shape && b.T == T) return b;
    return std::nullopt;
}

}  // namespace moex::bench
