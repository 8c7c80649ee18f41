// The sm_90a grouped GEMM's configuration chooser (cuda/gemm/sm90_config.h), a pure host function: the cluster and
// raster group it picks for the shapes bench/RESULTS.md measured (AK3, AK6), so a change of policy is a visible test
// change. Runs without a GPU.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tests/test_support.h"
#if MOEX_WITH_CUDA
#include "cuda/gemm/sm90_config.h"
#include "cuda/gemm/sm90_scheduler.cuh"
#endif

namespace moex::test {
namespace {

#if MOEX_WITH_CUDA
// The packed layout's up GEMM of a call: S = T·k rows, tiles bounded by ceil(S / 128) + min(E, S).
cuda::GroupedGemmArgs up_gemm(int64_t T, int64_t k, int64_t E, int64_t H, int64_t I) {
    static const int32_t kInt = 0;
    void* const p = reinterpret_cast<void*>(uintptr_t(256));
    const int64_t S = T * k;
    cuda::GroupedGemmArgs a{};
    a.A = a.B = a.D = p;
    a.m_tile_expert = a.num_m_tiles = a.expert_row_start = a.expert_row_count = &kInt;
    a.m_tile_row0 = &kInt;
    a.P = S, a.N = 2 * I, a.K = H, a.E = E, a.max_m_tiles = (S + 127) / 128 + std::min(E, S);
    a.dtype = a.b_dtype = DType::kBF16, a.epilogue = cuda::Epilogue::kGate;
    a.gate = {Activation::kSilu, GateKind::kDefault, true, 1.702f, 7.0f};
    return a;
}

TEST(Sm90Config, PrefillPairsCtasAndRastersSixTiles) {
    // deepseek-v3 T = 4096: ~128 rows an expert (cluster 2 through mean rows), two tile slots an expert (group 6).
    const auto ds = cuda::choose_grouped_gemm_sm90_config(up_gemm(4096, 8, 256, 7168, 2048), 132);
    ASSERT_EQ(ds.why_not, nullptr);
    EXPECT_EQ(ds.cluster_m, 2);
    EXPECT_EQ(ds.group_m, 6);
    EXPECT_TRUE(ds.expert_groups);
    // mixtral-8x7b T = 16384: 4096 rows an expert (33 tile slots: groups every 6 M tiles, not at expert boundaries).
    const auto mx = cuda::choose_grouped_gemm_sm90_config(up_gemm(16384, 2, 8, 4096, 14336), 132);
    EXPECT_EQ(mx.cluster_m, 2);
    EXPECT_EQ(mx.group_m, 6);
    EXPECT_FALSE(mx.expert_groups);
    EXPECT_TRUE(cuda::choose_grouped_gemm_sm90_config(up_gemm(4096, 2, 8, 4096, 14336), 132).expert_groups);
}

// FP4 weights (the e2m1 codes converted in the kernel): what the kernel refuses, each with its reason, and no CTA
// pairs where bf16 weights would get them (64 rows an expert).
TEST(Sm90Config, Fp4RefusalsNameTheReasonAndKeepOneCta) {
    static const uint8_t kByte = 0;
    cuda::GroupedGemmArgs a = up_gemm(128, 2, 4, 256, 256);
    ASSERT_EQ(cuda::choose_grouped_gemm_sm90_config(a, 132).cluster_m, 2);
    a.b_dtype = DType::kU8;
    a.b_scales = {.format = QuantFormat::kMxfp4,
                  .data = &kByte,
                  .dtype = DType::kUE8M0,
                  .row_shift = 0,
                  .col_shift = 5,
                  .rows_b = 512,
                  .cols_b = 8,
                  .global = nullptr};
    EXPECT_EQ(cuda::sm90_why_not(a), nullptr);
    EXPECT_EQ(cuda::choose_grouped_gemm_sm90_config(a, 132).cluster_m, 1);  // each CTA converts its own B
    const auto refused = [&](cuda::GroupedGemmArgs b, const char* what) {
        const char* why = cuda::sm90_why_not(b);
        ASSERT_NE(why, nullptr) << what;
        EXPECT_NE(std::string(why).find(what), std::string::npos) << why;
    };
    cuda::GroupedGemmArgs b = a;
    b.dtype = DType::kF16;
    refused(b, "bf16 activations only");
    b = a, b.b_n_major = true;
    refused(b, "K-major B only");
    b = a, b.K = 240;
    refused(b, "K a multiple of 32");
    b = a, b.b_scales.col_shift = 4;  // mxfp4 with 16 codes a scale
    refused(b, "32 (mxfp4) or 16 (nvfp4)");
    b = a, b.a_scales = reinterpret_cast<const float*>(uintptr_t(256));
    refused(b, "unquantized activations only");
}

TEST(Sm90Config, DecodeKeepsOneCtaAndGroupsOfTwo) {
    // qwen3-30b-a3b T = 1: 8 rows over 128 experts, one tile each at most.
    const auto c = cuda::choose_grouped_gemm_sm90_config(up_gemm(1, 8, 128, 2048, 768), 132);
    ASSERT_EQ(c.why_not, nullptr);
    EXPECT_EQ(c.cluster_m, 1);
    EXPECT_EQ(c.group_m, 2);
}

// Decodes every tile of s: each in range and each (M tile, N tile) exactly once; check(t, tile) adds a test's own
// conditions. `what` names the case in failures.
template <typename Check>
void expect_every_tile_once(const cuda::sm90::TileScheduler& s, int32_t num_m, int32_t num_n, const std::string& what,
                            Check check) {
    ASSERT_EQ(s.total, num_m * num_n) << what;
    std::vector<int> seen(size_t(s.total), 0);
    for (int32_t t = 0; t < s.total; ++t) {
        const cuda::sm90::TileCoord c = s.decode(t);
        ASSERT_TRUE(c.m >= 0 && c.m < num_m && c.n >= 0 && c.n < num_n)
            << what << " t " << t << " -> (" << c.m << ", " << c.n << ")";
        ++seen[size_t(c.m) * size_t(num_n) + size_t(c.n)];
        check(t, c);
    }
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << what << " tile " << i;
}

// With an even group (2-CTA clusters) the pair of tiles t, t ^ 1 shares its N tile (B multicast) or, in the last lone
// M tile, its M tile. Random M / N tile counts and groups.
TEST(Sm90Scheduler, EveryTileOnceAndPairsShareATile) {
    std::mt19937 rng(11);
    for (int trial = 0; trial < 400; ++trial) {
        const int32_t num_m = 1 + int32_t(rng() % 70), num_n = 1 + int32_t(rng() % 17);
        const int32_t group = 1 + int32_t(rng() % 17);
        const cuda::sm90::TileScheduler s(&num_m, num_m, num_n, group);
        const std::string what = "trial " + std::to_string(trial);
        expect_every_tile_once(s, num_m, num_n, what, [&](int32_t t, cuda::sm90::TileCoord c) {
            if (group % 2 == 0 && t % 2 == 0 && s.peer_alive(t)) {
                const cuda::sm90::TileCoord d = s.decode(t + 1);
                EXPECT_TRUE(c.n == d.n || c.m == d.m) << what << " t " << t;
            }
        });
    }
}

// With groups aligned to experts (each expert's M tiles from its first, at most group_m a group; experts with no
// tiles too) a group never holds two experts' tiles; groups every group_m M tiles too. Random routings, group sizes
// and N tile counts.
TEST(Sm90Scheduler, EveryTileOnceAndExpertGroupsHoldOneExpert) {
    std::mt19937 rng(11);
    for (int trial = 0; trial < 300; ++trial) {
        const int32_t E = 1 + int32_t(rng() % 40), num_n = 1 + int32_t(rng() % 17), group = 1 + int32_t(rng() % 9);
        std::vector<int32_t> starts(size_t(E) + 1, 0), tile_expert;
        for (int32_t e = 0; e < E; ++e) {
            const int32_t tiles = rng() % 4 == 0 ? 0 : int32_t(rng() % 12);
            starts[size_t(e) + 1] = starts[size_t(e)] + tiles;
            tile_expert.insert(tile_expert.end(), size_t(tiles), e);
        }
        const int32_t num_m = starts[size_t(E)];
        if (num_m == 0) continue;
        for (const bool experts : {false, true}) {
            const cuda::sm90::TileScheduler s(&num_m, num_m, num_n, group, tile_expert.data(),
                                              experts ? starts.data() : nullptr, E);
            const std::string what = "trial " + std::to_string(trial) + " experts " + std::to_string(experts);
            expect_every_tile_once(s, num_m, num_n, what, [&](int32_t t, cuda::sm90::TileCoord c) {
                // The group of t holds t / num_n's M tile: same expert, within group_m M tiles of it.
                if (!experts) return;
                const int32_t mm = t / num_n;
                EXPECT_EQ(tile_expert[size_t(c.m)], tile_expert[size_t(mm)]) << what << " t " << t;
                EXPECT_LT(std::abs(c.m - mm), group) << what << " t " << t;
            });
        }
    }
}
#endif

}  // namespace
}  // namespace moex::test
