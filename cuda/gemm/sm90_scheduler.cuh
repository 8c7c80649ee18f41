// Static persistent tile schedule of the sm_90a grouped GEMM (host-device: tests/test_sm90_config.cpp walks it): CTA b
// takes tiles b, b + grid, b + 2·grid, ... Tiles are rasterised in groups of group_m M tiles (M fastest inside a group,
// then N) so that the CTAs running at the same time share A rows and B columns through L2. The tile count is read from
// device memory. With expert_tile_start the groups start at expert boundaries: each expert's M tiles split into groups
// of at most group_m from its first tile, so the tiles that read one B tile (one expert, one N tile) run next to each
// other in one group instead of in two groups that straddle the expert (bench/RESULTS.md AN). Group g of M tiles [c0,
// c1) holds tiles [c0·num_n, c1·num_n): the group of tile t is the one of M tile t / num_n.
#pragma once

#include <cstdint>

#include "cuda/common/host_device.h"

namespace moex::cuda::sm90 {

struct TileCoord {
    int32_t m;  // M tile: rows [128·m, 128·m + 128), one expert
    int32_t n;  // N tile
};

// With a 2-CTA cluster, the CTA pair runs tiles t and t ^ 1 (grid and group_m even). Every region of the
// rasterisation starts at an even tile index, so a pair gets adjacent M tiles of the same N tile, except in the
// last lone M tile (group of one) where the pair gets two N tiles of one M tile.
struct TileScheduler {
    int32_t num_m;    // M tiles to process: *num_m_tiles clamped to [0, max_m_tiles]
    int32_t num_n;    // N tiles
    int32_t total;    // num_m · num_n
    int32_t group_m;  // M tiles per group (at most, with expert groups)
    int32_t E;
    const int32_t* tile_expert;        // (num_m,) expert of each M tile, ascending
    const int32_t* expert_tile_start;  // (E + 1,) or nullptr: groups start every group_m M tiles

    MOEX_HOST_DEVICE_INLINE TileScheduler(const int32_t* num_m_tiles, int32_t max_m_tiles, int32_t n_tiles,
                                          int32_t group, const int32_t* m_tile_expert = nullptr,
                                          const int32_t* tile_starts = nullptr, int32_t experts = 0)
        : E(experts), tile_expert(m_tile_expert), expert_tile_start(tile_starts) {
        int32_t m = *num_m_tiles;
        m = m < 0 ? 0 : (m > max_m_tiles ? max_m_tiles : m);
        num_m = m;
        num_n = n_tiles;
        total = m * n_tiles;
        group_m = group;
    }

    MOEX_HOST_DEVICE_INLINE TileCoord decode(int32_t t) const {
        if (expert_tile_start != nullptr) {
            const int32_t mm = t / num_n;  // an M tile of t's group
            int32_t e = tile_expert[mm];
            e = e < 0 ? 0 : (e >= E ? E - 1 : e);  // in bounds whatever the routing wrote
            const int32_t first = expert_tile_start[e], last = expert_tile_start[e + 1];
            const int32_t end = last < num_m ? last : num_m;
            const int32_t c0 = mm - (mm - first) % group_m, left = end - c0;
            const int32_t size = left < 1 ? 1 : (left < group_m ? left : group_m);
            const int32_t u = t - c0 * num_n;
            return {c0 + u % size, u / size};
        }
        const int32_t full_m = num_m - num_m % group_m;  // M tiles in complete groups
        if (t < full_m * num_n) {
            const int32_t span = group_m * num_n;
            const int32_t g = t / span, r = t - g * span;
            return {g * group_m + r % group_m, r / group_m};
        }
        // Remainder: an even-sized group, then at most one lone M tile.
        const int32_t rest = num_m - full_m, rest_even = rest & ~1;
        int32_t u = t - full_m * num_n;
        if (u < rest_even * num_n) return {full_m + u % rest_even, u / rest_even};
        u -= rest_even * num_n;
        return {full_m + rest_even, u};
    }

    MOEX_HOST_DEVICE_INLINE bool peer_alive(int32_t t) const { return (t ^ 1) < total; }
};

}  // namespace moex::cuda::sm90
