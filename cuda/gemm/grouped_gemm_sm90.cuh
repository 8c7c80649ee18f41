// The sm_90a grouped GEMM kernel over the padded-contiguous layout of grouped_gemm.h: a persistent,
// warp-specialised kernel (one TMA producer warp, two wgmma consumer warpgroups) with 128x256x64 tiles in a
// 4-stage TMA ring, optional 2-CTA clusters sharing B by multicast, and TMA-store epilogues (sm90_epilogue.cuh).
// kFp8: e4m3 A and B, 128 K per stage (the same bytes), each warpgroup's 64 x 256 tile computed as two m64n128k32
// halves per K block into a 64-register temporary and promoted with the block's scales (DeepGEMM's recipe); a second
// producer warp stages each stage's B scales beside it (sm90_fp8_scales.cuh).
// kFp4: e2m1 B converted to bf16 in shared memory by the consumers while the previous stage's MMAs run (sm90_fp4.cuh).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/quant.cuh"
#include "cuda/gemm/sm90_epilogue.cuh"
#include "cuda/gemm/sm90_fp4.cuh"
#include "cuda/gemm/sm90_fp8_scales.cuh"
#include "cuda/gemm/sm90_scheduler.cuh"
#include "cuda/gemm/sm90_tma.cuh"
#include "cuda/gemm/sm90_wgmma.cuh"

namespace moex::cuda::sm90 {

// Tile: 128 rows (one expert block) x 256 accumulator columns x 64 K per stage. Each consumer warpgroup owns 64
// rows x 256 columns = 128 f32 registers per thread (m64n256k16, the widest wgmma: most FLOPs per byte of
// shared memory read). Per stage: A 16 KB + B 32 KB; 4 stages = 192 KB + 32 KB store staging + 1 KB bias of the
// 227 KB available (a fifth stage does not fit).
inline constexpr int32_t kBlockM = 128, kBlockN = 256, kBlockK = 64, kStages = 4;
inline constexpr int32_t kThreads = 384;  // warpgroups 0, 1: consumers; warpgroup 2: producer (one thread issues)
inline constexpr uint32_t kABytes = kBlockM * kBlockK * 2;
inline constexpr uint32_t kBBytes = kBlockN * kBlockK * 2;
inline constexpr uint32_t kStagingBytes = 2 * 2 * kStoreBoxBytes;  // 2 warpgroups x 2 boxes
inline constexpr uint32_t kBiasBytes = 2 * kBlockN * 2;            // 2 warpgroups x 256 16-bit bias values

// How the kernel takes B: in A's 16-bit dtype, as e4m3 codes with e4m3 A, or as e2m1 codes (bf16 A).
enum class BIn : int32_t { kDtype = 0, kFp8 = 1, kFp4 = 2 };

// Shared memory (offsets from the 1024-aligned base): A's ring, kFp4's byte ring, B's ring (kFp4: the converted
// stages), the store staging, the bias slots, the tile slots (one TileInfo per stage), the barriers (full and empty
// per stage; kFp4: bfull and bempty per converted stage), then kFp8's B scale slots (one float2 per stage). kFp4: 64
// + 32 + 96 + 32 KB.
template <BIn kB>
struct SmemLayout {
    static constexpr bool kFp4 = kB == BIn::kFp4, kFp8 = kB == BIn::kFp8;
    static constexpr int32_t b_stages = kFp4 ? kB4Stages : kStages;
    static constexpr uint32_t raw = kStages * kABytes;
    static constexpr uint32_t b = raw + (kFp4 ? kStages * kB4Bytes : 0);
    static constexpr uint32_t staging = b + b_stages * kBBytes;
    static constexpr uint32_t bias = staging + kStagingBytes;
    static constexpr uint32_t info = bias + kBiasBytes;
    static constexpr uint32_t bars = info + kStages * 16;
    static constexpr uint32_t b_scales = bars + (2 * kStages + (kFp4 ? 2 * kB4Stages : 0)) * 8;
    static constexpr uint32_t bytes = 1024 /* alignment slack */ + b_scales + (kFp8 ? kStages * kFp8ScaleSlotBytes : 0);
    static_assert(bytes <= 232448, "over the 227 KB opt-in shared memory of sm_90");
};
// 2 x 128 x 232 + 128 x 40 = 64512 = 384 x 168 registers (the launch bound's); the consumers need 128 accumulators
// + epilogue temporaries.
inline constexpr uint32_t kConsumerRegs = 232, kProducerRegs = 40;

struct Sm90Params {
    CUtensorMap map_a;  // A (P, K): box 64 K x 128 rows
    CUtensorMap map_b;  // B (E, N, K): box 64 K x 128 N x 1;  b_n_major (E, K, N): box 64 N x 64 K x 1;
                        // kFp4: (E, N, K / 2) bytes, box 32 x 128 x 1, no swizzle
    CUtensorMap map_d;  // D (P, N_out): box 128 bytes x 16 rows (one warp's, sm90_epilogue.cuh)
    CUtensorMap map_s;  // kGateSave: save as (P, halves, width) (sm90_epilogue.cuh): box 64 columns x 1 x 16 rows
    EpilogueParams epi;
    const int32_t* m_tile_expert;      // (max_m_tiles,)
    const int32_t* num_m_tiles;        // (1,)
    const int32_t* expert_row_start;   // (E + 1,)
    const int32_t* expert_row_count;   // (E,)
    const int32_t* m_tile_row0;        // (max_m_tiles,) packed layout: first row of each M tile; nullptr: 128·m
    const int32_t* expert_tile_start;  // (E + 1,) or nullptr: raster groups aligned to experts (sm90_scheduler.cuh)
    int32_t K, E;
    int32_t num_n_tiles;  // ceil(N / 256); kGate concatenated: ceil(N / 2 / 128)
    int32_t max_m_tiles;
    int32_t group_m;    // rasterisation group (sm90_scheduler.cuh)
    int32_t cluster_m;  // 1 or 2 (the launch's cluster size)
    // kFp8: A and B are e4m3 codes; each 128-deep K block's partial sums are promoted with a_scales (P, a_slices)
    // of the row and promo_scale of the B half (quant.cuh), k_slice K values per scale slice (a multiple of 128).
    // kFp4: the e2m1 codes' scales (sm90_fp4.cuh).
    WeightScales b_scales;
    const float* a_scales;
    int32_t a_slices, k_slice;
};

// What a tile is, as the producer decodes it: the expert id (as routed: a bad one skips the tile's MMAs), the first
// row, the N tile and the end of the expert's rows (the packed layout's store limit; 0 for a bad id). The producer
// writes it into the slot of the tile's first stage before that stage's arrival, so the 16-bit consumers read it
// after the stage's wait with one shared load instead of decoding the tile themselves (bench/RESULTS.md AQ).
struct alignas(16) TileInfo {
    int32_t expert, row0, n_tile, row_end;
};

// kFp8: the activation scales of one K block of this thread's rows r_lo, r_lo + 8.
struct RowScales {
    float a_lo, a_hi;
};

// kFp8: one K block is 128 e4m3 values, the same 128-byte swizzled line (and stage bytes) as 64 bf16 values.
template <bool kFp8>
inline constexpr int32_t kStageK = kFp8 ? 128 : kBlockK;

// The expert whose B (and scales) a tile loads: a bad id loads expert 0, in bounds, and its tile skips its MMAs.
__device__ __forceinline__ int32_t expert_to_load(int32_t e, int32_t E) {
    return static_cast<uint32_t>(e) < static_cast<uint32_t>(E) ? e : 0;
}
// B rows of N tile n's two 128-wide halves: a [gate | up] pair (concatenated gate), or 256 consecutive rows.
__device__ __forceinline__ int2 b_halves(const Sm90Params& p, bool gate_concat, int32_t n) {
    const int32_t half0 = gate_concat ? n * 128 : n * 256;
    return make_int2(half0, gate_concat ? p.epi.n_half + half0 : half0 + 128);
}

template <typename T, bool kBNMajor, EpiKind kEpi, BIn kB>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_sm90_kernel(const __grid_constant__ Sm90Params p) {
    constexpr bool kFp8 = kB == BIn::kFp8, kFp4 = kB == BIn::kFp4;
    using L = SmemLayout<kB>;
    extern __shared__ uint8_t smem_raw[];
    uint8_t* smem = align_smem_1024(smem_raw);
    uint8_t* smem_a = smem;                                // kStages x (128 rows x 128 B)
    uint8_t* smem_b4 = smem + L::raw;                      // kFp4: kStages x (256 rows x 32 B of e2m1 codes)
    uint8_t* smem_b = smem + L::b;                         // b_stages x (256 rows x 128 B) or 4 boxes (64 k x 128 B)
    uint8_t* staging = smem + L::staging;                  // 2 warpgroups x 2 boxes (64 rows x 128 B)
    T* bias_slots = reinterpret_cast<T*>(smem + L::bias);  // 2 warpgroups x 256
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::bars);
    uint64_t* empty = full + kStages;
    uint64_t* bfull = empty + kStages;  // kFp4: the converted ring's barriers
    uint64_t* bempty = bfull + kB4Stages;
    float2* b_scale_slots = reinterpret_cast<float2*>(smem + L::b_scales);  // kFp8: (kStages,)
    TileInfo* info_slots = reinterpret_cast<TileInfo*>(smem + L::info);     // (kStages,): tiles' metadata

    const uint32_t warp = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);
    const uint32_t lane = threadIdx.x % 32;
    const int32_t cluster_m = p.cluster_m;
    const uint32_t rank = cluster_m > 1 ? cluster_cta_rank() : 0;
    const bool gate_concat = is_gate_epi(kEpi) && p.epi.gate.concatenated;

    if (threadIdx.x == 256) {
#pragma unroll
        for (int s = 0; s < kStages; ++s) {
            mbar_init(&full[s], kFp8 ? 2 : 1);    // the producer's arrive.expect_tx (kFp8: and the scale warp's)
            mbar_init(&empty[s], 8 * cluster_m);  // every consumer warp of every CTA it feeds
        }
        if constexpr (kFp4) {
#pragma unroll
            for (int s = 0; s < kB4Stages; ++s) {
                mbar_init(&bfull[s], kB4Threads);  // every consumer thread converts a part
                mbar_init(&bempty[s], 8);          // every consumer warp (cluster 1)
            }
        }
        fence_mbarrier_init();
    }
    if (cluster_m > 1)
        cluster_sync();
    else
        __syncthreads();

    const TileScheduler sched(p.num_m_tiles, p.max_m_tiles, p.num_n_tiles, p.group_m, p.m_tile_expert,
                              p.expert_tile_start, p.E);
    constexpr int32_t kBK = kStageK<kFp8>;
    const int32_t num_kb = (p.K + kBK - 1) / kBK;
    uint32_t stage = 0, phase = 0;
    // Tile t's metadata; its decode reads device memory (with expert-aligned groups, dependent loads), so its users
    // take it one tile ahead. Packed layout: rows at or past the expert's end (the next expert's) are not stored; past
    // the last expert's end (rows of no expert, below P) they are, so that every row a later kernel's tile reads is
    // written.
    const bool packed = p.m_tile_row0 != nullptr;
    auto tile_info = [&](int32_t t) {
        if (t >= sched.total) return TileInfo{-1, 0, 0, 0};
        const TileCoord c = sched.decode(t);
        const int32_t e = p.m_tile_expert[c.m];
        int32_t row_end = 0;
        if (static_cast<uint32_t>(e) < static_cast<uint32_t>(p.E)) {
            const int32_t end = p.expert_row_start[e] + p.expert_row_count[e];
            row_end = packed && end == p.expert_row_start[p.E] ? p.epi.P : end;
        }
        return TileInfo{e, packed ? p.m_tile_row0[c.m] : c.m * kBlockM, c.n, row_end};
    };
    // The 16-bit consumers read each tile's metadata from its first stage's slot (FP8 and FP4 load their first
    // stage's scales before its wait, so they decode the tile themselves, one tile ahead).
    constexpr bool kInfo = !kFp8 && !kFp4;

    if (warp >= 8) {
        // ---------------------------------------------------------------- producer: one thread issues all TMA
        regs_lower<kProducerRegs>();
        if (warp == 8 && lane == 0) {
            tma_prefetch_map(&p.map_a);
            tma_prefetch_map(&p.map_b);
            TileInfo info = tile_info(blockIdx.x);
            for (int32_t t = blockIdx.x; t < sched.total; t += gridDim.x) {
                const TileInfo next = tile_info(t + gridDim.x);  // its loads in flight during this tile's issue
                const int32_t e = expert_to_load(info.expert, p.E);
                bool multicast = false;
                if (cluster_m > 1 && sched.peer_alive(t)) {
                    const TileCoord peer = sched.decode(t ^ 1);
                    const int32_t pe = expert_to_load(p.m_tile_expert[peer.m], p.E);
                    multicast = peer.n == info.n_tile && pe == e;
                }
                const int2 halves = b_halves(p, gate_concat, info.n_tile);
                const int32_t half0 = halves.x, half1 = halves.y;
                const int32_t row0 = info.row0;
                for (int32_t kb = 0; kb < num_kb; ++kb) {
                    const int32_t k0 = kb * kBK;
                    mbar_wait_parked(&empty[stage], phase ^ 1);
                    // The stage's arrival (a release) publishes the slot to the consumers' wait (an acquire).
                    if (kInfo && kb == 0) info_slots[stage] = info;
                    mbar_arrive_expect_tx(&full[stage], kABytes + (kFp4 ? kB4Bytes : kBBytes));
                    tma_load_2d(smem_a + stage * kABytes, &p.map_a, &full[stage], k0, row0);
                    if constexpr (kFp4) {  // the codes of both halves; the consumers convert them from here
                        tma_load_3d(smem_b4 + stage * kB4Bytes, &p.map_b, &full[stage], k0 / 2, half0, e);
                        tma_load_3d(smem_b4 + stage * kB4Bytes + kB4Bytes / 2, &p.map_b, &full[stage], k0 / 2, half1,
                                    e);
                        if (++stage == kStages) stage = 0, phase ^= 1;
                        continue;
                    }
                    uint8_t* b_dst = smem_b + stage * kBBytes;
#pragma unroll
                    for (int32_t h = 0; h < 2; ++h) {
                        if (multicast && h != static_cast<int32_t>(rank)) continue;  // the peer loads this half
                        const int32_t nb = h == 0 ? half0 : half1;
                        uint8_t* dst = b_dst + h * (kBBytes / 2);
                        if constexpr (!kBNMajor) {
                            if (multicast)
                                tma_load_3d_multicast(dst, &p.map_b, &full[stage], k0, nb, e, 0x3);
                            else
                                tma_load_3d(dst, &p.map_b, &full[stage], k0, nb, e);
                        } else {
#pragma unroll
                            for (int32_t i = 0; i < 2; ++i) {
                                if (multicast)
                                    tma_load_3d_multicast(dst + i * (kBBytes / 4), &p.map_b, &full[stage], nb + 64 * i,
                                                          k0, e, 0x3);
                                else
                                    tma_load_3d(dst + i * (kBBytes / 4), &p.map_b, &full[stage], nb + 64 * i, k0, e);
                            }
                        }
                    }
                    if (++stage == kStages) stage = 0, phase ^= 1;
                }
                info = next;
            }
        } else if (kFp8 && warp == 9 && lane == 0) {
            // The B scales of every stage the TMA thread fills, in the same order, loaded before the slot is free.
            for (int32_t t = blockIdx.x; t < sched.total; t += gridDim.x) {
                const TileCoord tile = sched.decode(t);
                const int32_t e = expert_to_load(p.m_tile_expert[tile.m], p.E);
                const int2 halves = b_halves(p, gate_concat, tile.n);
                const Fp8ScaleRows rows = fp8_scale_rows(p.b_scales, e, halves.x, halves.y, p.epi.N);
                for (int32_t kb = 0; kb < num_kb; ++kb) {
                    const float2 w = fp8_block_scales(p.b_scales, rows, kb);
                    mbar_wait_parked(&empty[stage], phase ^ 1);
                    b_scale_slots[stage] = w;
                    mbar_arrive(&full[stage]);  // release: the slot's store is visible to the stage's waiters
                    if (++stage == kStages) stage = 0, phase ^= 1;
                }
            }
        }
    } else {
        // ---------------------------------------------------------------- consumers: two math warpgroups
        regs_raise<kConsumerRegs>();
        const uint32_t wg = warp / 4;
        const EpiThread th(warp, lane, threadIdx.x, 1 + wg);
        uint8_t* my_staging = staging + wg * 2 * kStoreBoxBytes;
        T* my_bias = bias_slots + wg * kBlockN;
        uint32_t buf = 0;
        uint32_t bst = 0, bph = 0;  // kFp4: the converted ring's stage and parity
        // Descriptors of stage 0; per stage and k slice only the start address moves (sm90_wgmma.cuh).
        const uint64_t desc_a0 = make_smem_desc(smem_u32(smem_a) + wg * 64 * 128, 16, 1024);
        const uint64_t desc_b0 = make_smem_desc(smem_u32(smem_b), kBNMajor ? 8192 : 16, 1024);
        constexpr uint32_t kBStepK = kBNMajor ? 16 * 128 : 16 * 2;  // bytes per 16-deep K slice of B
        float acc[128];

        // kInfo: the tile's metadata from its first stage's slot, after that stage's wait (the main loop's wait of
        // K block 0 then passes at once); otherwise decoded here one tile ahead, so no dependent global load stalls a
        // tile start.
        TileInfo info = kInfo ? TileInfo{} : tile_info(blockIdx.x);
        for (int32_t t = blockIdx.x; t < sched.total; t += gridDim.x) {
            TileInfo next{};
            if constexpr (kInfo) {
                mbar_wait(&full[stage], phase);
                info = info_slots[stage];
            } else {
                next = tile_info(t + gridDim.x);
            }
            const int32_t e = info.expert, row_end = info.row_end, n_tile = info.n_tile;
            const int32_t row0 = info.row0 + static_cast<int32_t>(wg) * 64;
            // A warpgroup whose 64 rows are all padding skips its MMAs and its stores (padding is never read).
            const bool active = row0 < row_end;
            const bool peer = cluster_m > 1 && sched.peer_alive(t);
            TileExtras extras{1.f, 1.f, 0u, 1.f};
            const int2 halves = b_halves(p, gate_concat, n_tile);
            const int32_t half0 = halves.x, half1 = halves.y;
            if (active) extras = load_tile_extras<T>(p.epi, th, row0, e, half0, half1);
            if constexpr (kFp4) {
                if (active && p.b_scales.global != nullptr) extras.es *= p.b_scales.global[e];  // nvfp4
            }
            auto release = [&](uint32_t s) {
                if (cluster_m == 1) {
                    if (lane == 0) mbar_arrive(&empty[s]);
                } else if (lane < 2) {
                    mbar_arrive_cluster(&empty[s], peer ? lane : rank);  // lanes 0, 1 -> CTAs 0, 1
                }
            };
            auto release_b = [&](uint32_t s) {  // kFp4: a converted stage free to be converted into again
                if (kFp4 && lane == 0) mbar_arrive(&bempty[s]);
            };

            uint32_t prev = 0, bprev = 0;
            if constexpr (kFp8) {
                // Per K block and B half: 4 x m64n128k32 into tmp, then acc += tmp * a_scale(row) * b_scale(half).
                // acc keeps the m64n256 layout (half h = registers 64h ..), so the epilogue is the bf16 one's.
                // The B halves' scales come with the stage (its slot, sm90_fp8_scales.cuh). The rows' activation
                // scales of K block kb are loaded when block kb - 2 starts, into one of three register pairs used in
                // turn (the loop is unrolled by three, so no pair is ever copied): nothing waits on an L2 round trip
                // until two blocks later (a one-block-ahead prefetch through a copy let the compiler wait on the
                // load between the two halves' MMAs; RESULTS L7).
                float tmp[64];
                RowScales s0{}, s1{}, s2{};
                // This tile's activation scale rows (one slice per a_blocks K blocks), so a K block's loads are
                // offsets. Packed layout: the last tile's rows may pass P; they read row P - 1's scales (not stored).
                const int32_t r_lo = min(row0 + static_cast<int32_t>(th.r_lo), p.epi.P - 1);
                const int32_t a_hi = (min(row0 + static_cast<int32_t>(th.r_lo) + 8, p.epi.P - 1) - r_lo) * p.a_slices;
                const float* a_row = p.a_scales + int64_t(r_lo) * p.a_slices;
                // a_blocks 0: a per-tensor slice of K < 128 values (one K block).
                const int32_t a_blocks = p.k_slice / kBK;
                auto load_scales = [&](int32_t kb, RowScales& s) {
                    kb = min(kb, num_kb - 1);  // past the end: load the last block's again (in bounds, unused)
                    const int32_t sa = a_blocks == 1 ? kb : kb * kBK / p.k_slice;
                    s.a_lo = a_row[sa], s.a_hi = a_row[sa + a_hi];
                };
                // One K block: both halves' MMAs, each waited for and promoted. The block's bookkeeping (the scale
                // loads two blocks ahead, this block's B scales from the stage's slot) is issued while the first
                // half's MMAs run, and the stage is released as soon as the second half's MMAs are done, before its
                // promotion: ncu found the warps' own instructions, issued after each drain, a large part of the FP8
                // GEMM's stalls.
                auto issue_half = [&](int h) {
                    wgmma_fence();
#pragma unroll
                    for (uint32_t k = 0; k < kBK / 32; ++k) {
                        wgmma_m64n128k32_e4m3(tmp, desc_advance(desc_a0, stage * kABytes + k * 32),
                                              desc_advance(desc_b0, stage * kBBytes + h * (kBBytes / 2) + k * 32), k);
                    }
                    wgmma_commit();
                    fence_accumulators(tmp);
                };
                // The half's B scale is read from the stage's slot after the wait (before the release that lets the
                // slot be refilled): read earlier, it would hold a register across the MMAs, which tipped the
                // consumers' 232 into spills.
                auto promote_half = [&](int h, const RowScales& a) {
                    wgmma_wait<0>();
                    fence_accumulators(tmp);
                    const float w = reinterpret_cast<const float*>(&b_scale_slots[stage])[h];
                    if (h == 1) release(stage);
                    const float s_lo = a.a_lo * w, s_hi = a.a_hi * w;
#pragma unroll
                    for (int i = 0; i < 64; ++i)
                        acc[64 * h + i] = fmaf(tmp[i], (i % 4) < 2 ? s_lo : s_hi, acc[64 * h + i]);
                };
                auto k_block = [&](int32_t kb, const RowScales& cur, RowScales& fill) {
                    mbar_wait(&full[stage], phase);
                    issue_half(0);
                    load_scales(kb + 2, fill);
                    promote_half(0, cur);
                    issue_half(1);
                    promote_half(1, cur);
                    if (++stage == kStages) stage = 0, phase ^= 1;
                };
#pragma unroll
                for (int i = 0; i < 128; ++i) acc[i] = 0.f;
                if (active) {
                    load_scales(0, s0), load_scales(1, s1);
                    for (int32_t kb = 0; kb < num_kb; kb += 3) {
                        k_block(kb, s0, s2);
                        if (kb + 1 < num_kb) k_block(kb + 1, s1, s0);
                        if (kb + 2 < num_kb) k_block(kb + 2, s2, s1);
                    }
                } else {
                    for (int32_t kb = 0; kb < num_kb; ++kb) {
                        mbar_wait(&full[stage], phase);
                        release(stage);
                        if (++stage == kStages) stage = 0, phase ^= 1;
                    }
                }
            } else if constexpr (kFp4) {
                // Stage kb + 1's B converted by both warpgroups while stage kb's MMAs run (sm90_fp4.cuh); a stage's
                // scales loaded two stages ahead into one of two register sets used in turn (the loop is unrolled by
                // two, so no set is copied and nothing waits on the loads before their stage).
                const int32_t e_in = expert_to_load(e, p.E);  // as the TMA's
                const Fp4Tile ft{&p.b_scales, e_in, half0, half1, p.epi.N, p.K, num_kb};
                const bool nv = p.b_scales.format == QuantFormat::kNvfp4;
                const uint32_t u0 = fp4_first_unit(wg, th.tid);
                auto scales = [&](int32_t kb) {
                    return nv ? fp4_scales<true>(ft, u0, kb) : fp4_scales<false>(ft, u0, kb);
                };
                // Converts a stage (A ring slot s, converted slot b) with its scales: both rings' waits, then publish.
                auto convert = [&](uint32_t s, uint32_t s_phase, uint32_t b, uint32_t b_phase, uint2 sc) {
                    mbar_wait(&full[s], s_phase);
                    mbar_wait(&bempty[b], b_phase ^ 1);
                    if (nv)
                        fp4_convert_units<true>(smem_b4 + s * kB4Bytes, smem_b + b * kBBytes, u0, sc);
                    else
                        fp4_convert_units<false>(smem_b4 + s * kB4Bytes, smem_b + b * kBBytes, u0, sc);
                    fence_proxy_async_smem();
                    mbar_arrive(&bfull[b]);
                };
                uint2 set0 = scales(0), set1 = scales(1);
                convert(stage, phase, bst, bph, set0);
                set0 = scales(2);
                auto step = [&](int32_t kb, uint2& next_set) {
                    mbar_wait(&bfull[bst], bph);  // stage kb's B (its A and codes: full, waited when converted)
                    if (active)
                        wgmma_k64_issue<T, false>(acc, desc_a0, stage * kABytes, 32, desc_b0, bst * kBBytes, kBStepK,
                                                  static_cast<uint32_t>(kb));
                    const uint32_t s1 = stage + 1 == kStages ? 0 : stage + 1, p1 = s1 == 0 ? phase ^ 1 : phase;
                    const uint32_t b1 = bst + 1 == kB4Stages ? 0 : bst + 1, q1 = b1 == 0 ? bph ^ 1 : bph;
                    if (kb + 1 < num_kb) {
                        convert(s1, p1, b1, q1, next_set);
                        next_set = scales(kb + 3);
                    }
                    if (active) {
                        wgmma_wait<1>();
                        if (kb > 0) release(prev), release_b(bprev);  // its MMAs are done; this stage's in flight
                    } else {
                        release(stage), release_b(bst);
                    }
                    prev = stage, bprev = bst;
                    stage = s1, phase = p1, bst = b1, bph = q1;
                };
                for (int32_t kb = 0; kb < num_kb; kb += 2) {
                    step(kb, set1);
                    if (kb + 1 < num_kb) step(kb + 1, set0);
                }
            } else {
                for (int32_t kb = 0; kb < num_kb; ++kb) {
                    mbar_wait(&full[stage], phase);
                    if (active) {
                        static_assert(kBlockK == 64, "one stage is one wgmma_k64_block");
                        wgmma_k64_block<T, kBNMajor>(acc, desc_a0, stage * kABytes, 32, desc_b0, stage * kBBytes,
                                                     kBStepK, static_cast<uint32_t>(kb));
                        if (kb > 0) release(prev);  // its MMAs are done; this stage's stay in flight
                    } else {
                        release(stage);
                    }
                    prev = stage;
                    if (++stage == kStages) stage = 0, phase ^= 1;
                }
            }
            wgmma_wait<0>();  // unconditional: no MMA may be in flight on any path out of the loop
            if (active) {
                fence_accumulators(acc);
                if (!kFp8) release(prev), release_b(bprev);  // kFp8 released every stage in its loop
                if (p.epi.expert_scale != nullptr || (kFp4 && p.b_scales.global != nullptr)) {
#pragma unroll
                    for (int i = 0; i < 128; ++i) acc[i] *= extras.es;
                }
                epilogue<T, kEpi>(p.epi, &p.map_d, &p.map_s, acc, my_staging, my_bias, buf, th, extras, row0,
                                  packed ? row_end : p.epi.P, n_tile);
            }
            if constexpr (!kInfo) info = next;
        }
        if (th.leader) bulk_wait_group_all();
    }

    // No CTA may leave while its peer can still arrive on its barriers or multicast into its shared memory.
    if (cluster_m > 1) {
        __syncwarp();
        cluster_sync();
    }
}

}  // namespace moex::cuda::sm90
