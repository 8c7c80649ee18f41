// The sm_90a weight-gradient GEMM (weight_grad.h): a persistent, warp-specialised kernel like the grouped GEMM
// (grouped_gemm_sm90.cuh: one TMA producer thread, two wgmma consumer warpgroups, a 4-stage ring of 48 KB), over
// tiles (expert, 128 M, 256 N) whose K loop is the expert's rows, 64 per stage. Both operands are MN-major: a TMA box
// is 64 consecutive M (or N) values of 64 rows, and the wgmma reads A and B transposed (sm90_wgmma.cuh). The
// accumulators leave through the grouped GEMM's TMA-store epilogue (sm90_epilogue.cuh: swizzled 64-row boxes, the
// last ones still being stored while the next tile's MMAs run), over C seen as (E·M, N) with each tile's rows
// clipped at its expert's end. With 2-CTA clusters (M tiles per expert even), the pair runs the adjacent M tiles of one
// (expert, N tile) and each CTA loads half of the B boxes for both by multicast: a third less L2 traffic per stage
// (ncu: the kernel without pairs ran at 87% of L2 throughput and 57% of the tensor cores').
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/gemm/sm90_epilogue.cuh"
#include "cuda/gemm/sm90_tma.cuh"
#include "cuda/gemm/sm90_wgmma.cuh"

namespace moex::cuda::sm90::wgrad {

inline constexpr int32_t kBlockM = 128, kBlockN = 256, kBlockRows = 64, kStages = 4;
inline constexpr int32_t kThreads = 384;                           // warpgroups 0, 1: consumers; 2: producer
inline constexpr uint32_t kBoxBytes = 64 * kBlockRows * 2;         // 64 values x 64 rows of 16 bits: 8 KB
inline constexpr uint32_t kABytes = kBlockM / 64 * kBoxBytes;      // 16 KB
inline constexpr uint32_t kBBytes = kBlockN / 64 * kBoxBytes;      // 32 KB
inline constexpr uint32_t kStagingBytes = 2 * 2 * kStoreBoxBytes;  // 2 warpgroups x 2 store boxes
inline constexpr uint32_t kSmemBytes =
    1024 + kStages * (kABytes + kBBytes) + kStagingBytes + 2 * kStages * sizeof(uint64_t);
static_assert(kSmemBytes <= 232448, "over the 227 KB opt-in shared memory of sm_90");
inline constexpr uint32_t kConsumerRegs = 232, kProducerRegs = 40;

struct Params {
    CUtensorMap map_a;  // A (P, M): box 64 M x 64 rows
    CUtensorMap map_b;  // B (P, N): box 64 N x 64 rows
    CUtensorMap map_c;  // C (E·M, N): box 64 N x 16 rows (one warp's store)
    void* C;            // (E, M, N)
    const int32_t* expert_row_start;
    const int32_t* expert_row_count;
    int32_t E, M, N;
    int32_t m_tiles, n_tiles;  // ceil(M / 128), ceil(N / 256)
    int32_t cluster;           // 1, or 2: CTA pairs share B (m_tiles even, so a pair never spans two experts)
};

struct Tile {
    int32_t e, m, n;
};
__device__ __forceinline__ Tile tile_at(const Params& p, int32_t t) {
    const int32_t per_expert = p.m_tiles * p.n_tiles, e = t / per_expert, r = t - e * per_expert;
    return {e, r % p.m_tiles, r / p.m_tiles};  // M fastest: the CTAs of a wave share the expert's B rows
}
__device__ __forceinline__ int32_t row_blocks(const Params& p, int32_t e) {
    const int32_t c = p.expert_row_count[e];
    return c > 0 ? (c + kBlockRows - 1) / kBlockRows : 0;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 1) weight_grad_sm90_kernel(const __grid_constant__ Params p) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = align_smem_1024(smem_raw);
    uint8_t* smem_a = smem;                         // kStages x 2 boxes (64 M x 64 rows)
    uint8_t* smem_b = smem_a + kStages * kABytes;   // kStages x 4 boxes (64 N x 64 rows)
    uint8_t* staging = smem_b + kStages * kBBytes;  // 2 warpgroups x 2 store boxes
    uint64_t* full = reinterpret_cast<uint64_t*>(staging + kStagingBytes);
    uint64_t* empty = full + kStages;

    const uint32_t warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);
    const uint32_t lane = threadIdx.x % 32;
    const int32_t cluster = p.cluster;
    const uint32_t rank = cluster > 1 ? cluster_cta_rank() : 0;
    if (threadIdx.x == 256) {
#pragma unroll
        for (int s = 0; s < kStages; ++s) {
            mbar_init(&full[s], 1);             // the producer's arrive.expect_tx
            mbar_init(&empty[s], 8 * cluster);  // every consumer warp of every CTA the slot's B feeds
        }
        fence_mbarrier_init();
    }
    if (cluster > 1)
        cluster_sync();
    else
        __syncthreads();

    const int32_t total = p.E * p.m_tiles * p.n_tiles;
    uint32_t stage = 0, phase = 0;

    if (warp >= 8) {
        // ---------------------------------------------------------------- producer: one thread issues all TMA
        regs_lower<kProducerRegs>();
        if (warp == 8 && lane == 0) {
            tma_prefetch_map(&p.map_a);
            tma_prefetch_map(&p.map_b);
            for (int32_t t = blockIdx.x; t < total; t += gridDim.x) {
                const Tile tile = tile_at(p, t);
                const int32_t row0 = p.expert_row_start[tile.e], blocks = row_blocks(p, tile.e);
                // Boxes that start past M or N are not loaded (their outputs are not stored): the others' bytes.
                const int32_t m0 = tile.m * kBlockM, n0 = tile.n * kBlockN;
                const int32_t a_boxes = m0 + 64 < p.M ? 2 : 1;
                const int32_t b_boxes = min(4, (p.N - n0 + 63) / 64);
                const uint32_t bytes = static_cast<uint32_t>(a_boxes + b_boxes) * kBoxBytes;
                for (int32_t kb = 0; kb < blocks; ++kb) {
                    const int32_t row = row0 + kb * kBlockRows;
                    mbar_wait_parked(&empty[stage], phase ^ 1);
                    mbar_arrive_expect_tx(&full[stage], bytes);
                    for (int32_t i = 0; i < a_boxes; ++i)
                        tma_load_2d(smem_a + stage * kABytes + i * kBoxBytes, &p.map_a, &full[stage], m0 + 64 * i, row);
                    // Pairs: tiles t and t ^ 1 are M tiles m, m + 1 of one (expert, N tile), so the same row blocks
                    // and B boxes; CTA r loads the boxes i % 2 == r into both (the empty barrier counted both CTAs'
                    // consumers, so the peer's slot is free too).
                    for (int32_t i = 0; i < b_boxes; ++i) {
                        uint8_t* dst = smem_b + stage * kBBytes + i * kBoxBytes;
                        if (cluster == 1)
                            tma_load_2d(dst, &p.map_b, &full[stage], n0 + 64 * i, row);
                        else if (i % 2 == static_cast<int32_t>(rank))
                            tma_load_2d_multicast(dst, &p.map_b, &full[stage], n0 + 64 * i, row, 0x3);
                    }
                    if (++stage == kStages) stage = 0, phase ^= 1;
                }
            }
        }
    } else {
        // ---------------------------------------------------------------- consumers: two math warpgroups
        regs_raise<kConsumerRegs>();
        const uint32_t wg = warp / 4;
        // MN-major operands (sm90_wgmma.cuh): SBO 1024 = the next 8 rows, LBO 8192 = the next box of 64 values; a
        // 16-row K slice starts 16 lines = 2048 bytes further. Warpgroup wg reads A's box wg (its 64 M values).
        const uint64_t desc_a0 = make_smem_desc(smem_u32(smem_a) + wg * kBoxBytes, kBoxBytes, 1024);
        const uint64_t desc_b0 = make_smem_desc(smem_u32(smem_b), kBoxBytes, 1024);
        constexpr uint32_t kSliceBytes = 16 * 128;
        float acc[128];
        // The epilogue's view of C: (E·M, N) rows in T, no bias or scales.
        EpilogueParams epi{};
        epi.P = p.E * p.M, epi.N = p.N, epi.D = p.C, epi.d_row_bytes = p.N * static_cast<int32_t>(sizeof(T));
        const EpiThread th(warp, lane, threadIdx.x, 1 + wg);
        const TileExtras extras{1.f, 1.f, 0u, 1.f};
        uint8_t* my_staging = staging + wg * 2 * kStoreBoxBytes;
        uint32_t buf = 0;
        auto release = [&](uint32_t s) {
            if (cluster == 1) {
                if (lane == 0) mbar_arrive(&empty[s]);
            } else if (lane < 2) {
                mbar_arrive_cluster(&empty[s], lane);  // lanes 0, 1 -> CTAs 0, 1
            }
        };
        for (int32_t t = blockIdx.x; t < total; t += gridDim.x) {
            const Tile tile = tile_at(p, t);
            const int32_t blocks = row_blocks(p, tile.e);
            const int32_t m0 = tile.m * kBlockM + static_cast<int32_t>(wg) * 64;
            const bool active = m0 < p.M;  // a warpgroup whose 64 M values are all past M skips its MMAs
            uint32_t prev = 0;
            // Zeroed here and always accumulated into, so that an expert without rows stores zeros with no branch
            // after the loop (one there, merging two definitions of acc, made the compiler spill: 209 local loads and
            // stores around the epilogue; the census now allows none).
#pragma unroll
            for (int i = 0; i < 128; ++i) acc[i] = 0.f;
            for (int32_t kb = 0; kb < blocks; ++kb) {
                mbar_wait(&full[stage], phase);
                if (active) {
                    static_assert(kBlockRows == 64, "one stage is one wgmma_k64_block");
                    wgmma_k64_block<T, true, true>(acc, desc_a0, stage * kABytes, kSliceBytes, desc_b0, stage * kBBytes,
                                                   kSliceBytes, /*accumulate=*/1u);
                    if (kb > 0) release(prev);  // its MMAs are done; this stage's stay in flight
                } else {
                    release(stage);
                }
                prev = stage;
                if (++stage == kStages) stage = 0, phase ^= 1;
            }
            wgmma_wait<0>();  // unconditional: no MMA may be in flight on any path out of the loop
            if (!active) continue;
            fence_accumulators(acc);
            if (blocks > 0) release(prev);
            const int32_t row_end = (tile.e + 1) * p.M;  // C's rows past the expert's end belong to the next one
            epilogue_store<T, T>(epi, &p.map_c, acc, my_staging, nullptr, buf, th, extras, tile.e * p.M + m0, row_end,
                                 tile.n);
        }
        if (th.leader) bulk_wait_group_all();
    }

    // No CTA may leave while its peer can still arrive on its barriers or multicast into its shared memory.
    if (cluster > 1) {
        __syncwarp();
        cluster_sync();
    }
}

}  // namespace moex::cuda::sm90::wgrad
