// Host-only configuration of the batched_mm (decode) projection kernels: which main loop, how many K splits, how
// many token rows per tile. Pure functions, so host tests can include this header without nvcc.
#pragma once

#include <cstddef>
#include <cstdint>

namespace moex::cuda::batched {

enum class Loop : int32_t {
    kMma = 0,      // bf16/f16, K-major weights, K % 8 == 0: weights stream from HBM straight into mma.sync
    kVecN = 1,     // N-major ("transposed") weights, rows 16-byte aligned: 16-byte loads along N, FMA
    kGeneric = 2,  // anything else (f32 K-major, odd sizes): scalar loads, FMA
};

struct ProjConfig {
    Loop loop;
    int nt;  // kMma: 8-row token groups per tile (chunk = 8 * nt rows); the SIMT loops use nt = 1
    int rt;  // kMma: 16-row weight tiles per warp
    int ks;  // K splits across the warps of a CTA
    int bw;  // logical weight rows per CTA
    size_t smem;
};

// Chunk rows (tile_rows of the routing) shared by both projections: 8 * nt, enough for an expert's rows under uniform
// top-k of E routing (mean + 4 sd, at most T); an expert with more takes another chunk and streams its weights again.
// With k = E = 1 every row goes to one expert: the chunk then holds T rows (up to 64). MOEX_BATCHED_NT overrides it.
int choose_nt(int64_t T, int64_t k, int64_t E);
// kMma only: the K split (1, 2, 4, 8) with the smallest modelled streaming time (waves of `slots` CTAs, HBM vs.
// per-CTA bandwidth, ramp-up per wave). MOEX_BATCHED_KS overrides it (tuning).
int choose_ks(int64_t rows_per_expert, int64_t K, double experts_touched, int rt, int slots);
ProjConfig make_config(Loop loop, int nt, int ks, int esize);

}  // namespace moex::cuda::batched
