// The one-kernel decode path of batched_mm (T <= 16, T * k <= 128 routed slots, 16-bit K-major weights, H and I
// multiples of 8): every SM runs one persistent CTA that routes the ids itself in shared memory, then streams its
// share of the up projection's weight rows and then its share of the down projection's through a ring of
// shared-memory stages filled by the copy engine (cp.async.bulk): no kernel boundary, CTA ramp or wave tail between
// the projections. Opt-in (MOEX_DECODE_STREAM=1, decode_stream.cu): measured at par with the three-launch pipeline,
// not ahead of it; what holds it back is in bench/RESULTS.md W.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/common/params.h"
#include "cuda/common/pdl.cuh"
#include "cuda/experts/batched.cuh"  // mma16816: the swap-AB MMA fed by contiguous 16-byte pieces
#include "cuda/gemm/sm90_tma.cuh"    // mbarriers

namespace moex::cuda::decode {

// TUTORIAL: one CTA per SM, three roles.
// - Work: a unit is 16 weight rows of one routed expert tile (up: 8 gate + 8 up channels, or 16 channels of an
//   ungated projection; down: 16 output columns) against the tile's token rows; a unit's K runs in chunks of kChunk.
//   The up units of all tiles are split evenly over the CTAs, then the down units; each CTA does its up units first.
// - The weight producer warp walks the CTA's (unit, chunk) list and copies each chunk's 16 weight rows into the next
//   ring stage, announcing the stage's bytes on its full barrier. Where a whole row fits a chunk (K <= kChunk) it
//   copies each run of consecutive rows as it lies (one copy; two for the gate and up rows of a concatenated unit),
//   else a chunk of each row (one copy per row, lanes 0..15): the copy engine moves few large copies much faster
//   than many small ones (1 KB rows: 1.24x the floor on mixtral T = 1, 4 KB rows 1.11x; bench/RESULTS.md W).
//   Weights depend on nothing, so it runs ahead as far as the ring allows, across the up/down boundary too.
// - The row producer warp copies the same chunk of the tile's token rows (x for up; h for down) into the stage. For
//   a down unit it first waits until every up unit of that tile has published its h rows (tile_done), so only the
//   token rows of the first down stages wait for the up phase to drain, never the weights behind them.
// - Eight consumer warps share each stage by 32-deep k steps (warp w takes steps w, w + 8, ...; mma.sync m16n8k16
//   with the weights as A, tokens as B) and release it; at a unit's end they leave their partial sums in one of two
//   buffers for the epilogue warp and go on with the next unit's stages at once.
// - The epilogue warp adds the partial sums in warp order (deterministic) and writes h = gate(acc + bias) (up) or
//   y = (acc + bias) * routing weight (down). When the CTA's run of units of one tile ends it publishes that tile's
//   h rows (one fence and one atomic per tile and CTA, tile_done); when its run of one 16-column block ends it sums y
//   over each token's slots in slot order into out if the whole block was its own, else it adds its count to the
//   block's col_arrive and the CTA that completes the block does that sum. Its fences and atomics never hold up the
//   stream: the consumers wait for it only when it is two units behind.
// Counters are zeroed by a one-CTA kernel launched before (programmatic dependent launch lets this kernel route and
// fill its ring meanwhile; pdl.cuh: nothing is written to global memory before the wait).

inline constexpr int kConsumerWarps = 8;
inline constexpr int kThreads = (kConsumerWarps + 3) * 32;  // + weight, token-row and epilogue warps
inline constexpr int kRed = 2;  // partial-sum buffers between the consumers and the epilogue warp
inline constexpr int kUnitRows = 16;
inline constexpr int kMaxSlots = 128;          // T * k
inline constexpr int kStageBytesMax = 210000;  // ring budget (of 227 KB per block, with the partial sums' 16 KB)

struct StreamArgs {
    const void* x;        // (T, H) dtype
    const void* ids;      // (T, k) int32 | int64
    const void* topk_w;   // (T, k) f32 | dtype
    const void* w_up;     // (E, N, H) dtype, N = 2I (gated) or I
    const void* w_down;   // (E, H, I) dtype
    const void* b_up;     // (E, N) or nullptr
    const void* b_down;   // (E, H) or nullptr
    void* h;              // (S, I) dtype, workspace
    float* y;             // (S, H) f32, workspace
    void* out;            // (T, H) dtype
    int32_t* tile_done;   // (kMaxSlots,) up units finished per tile, zeroed before the launch
    int32_t* col_arrive;  // (ceil(H / 16),) down units finished per column block, zeroed before the launch
    int64_t T, H, I, E, k;
    GateParams gate;
    bool has_gate, ids_i64, weights_f32;
    DType dtype;
};

// kChunk K elements per stage: 2048 with 8 token rows (2 stages), 1024 with 16 (3 stages); the copy engine wants large
// copies (bench/RESULTS.md W). Rows copied one by one land kChunk + 32 elements apart (64 bytes past a multiple of
// 128, so the 16-byte reads of 8 rows hit 32 distinct banks); runs of whole rows land as they lie (K apart, where two
// rows of one read phase may share banks: shared memory has bandwidth to spare here).
template <int NT>
struct Ring {
    static constexpr int kChunk = NT == 1 ? 2048 : 1024, kPitch = kChunk + 32;
    static constexpr int kTokenRows = 8 * NT;
    static constexpr int kStageRows = kUnitRows + kTokenRows;
    static constexpr int kStageElems = kStageRows * kPitch;
    static constexpr int kStages = kStageBytesMax / (kStageElems * 2);
    static constexpr size_t kBytes = size_t(kStages) * kStageElems * 2;
};

// ---- PTX: 1-D bulk copy, acquire load, proxy fence -----------------------------------------------------------
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_u32(dst)),
        "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_u32(bar))
        : "memory");
}
__device__ __forceinline__ int ld_acquire(const int32_t* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// Generic-proxy writes seen through an acquire, made visible to this thread's later bulk copies (async proxy).
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

// ---- routing in shared memory ---------------------------------------------------------------------------------
// Tiles of at most 8 * NT rows per hit expert, experts ascending, rows of an expert in slot order (the order of the
// routing kernels, routing.cuh). O(S^2) over S <= 128 slots, all threads.
struct Routes {
    int slot_e[kMaxSlots], rank[kMaxSlots], count[kMaxSlots];
    int row_slot[kMaxSlots];
    int tile_e[kMaxSlots], tile_row0[kMaxSlots], tile_n[kMaxSlots];
    int num_tiles;
};

__device__ void route(const StreamArgs& a, Routes& r, int mc) {
    const int S = int(a.T * a.k);
    if (threadIdx.x == 0) r.num_tiles = 0;
    for (int s = threadIdx.x; s < S; s += blockDim.x) r.slot_e[s] = load_expert(a.ids, a.ids_i64, s, a.E);
    __syncthreads();
    for (int s = threadIdx.x; s < S; s += blockDim.x) {
        const int e = r.slot_e[s];
        int rank = 0, count = 0;
        for (int s2 = 0; s2 < S; ++s2)
            if (r.slot_e[s2] == e) ++count, rank += s2 < s;
        r.rank[s] = rank, r.count[s] = count;
    }
    __syncthreads();
    for (int s = threadIdx.x; s < S; s += blockDim.x) {
        const int e = r.slot_e[s];
        if (e < 0) continue;
        int rows_before = 0, tiles_before = 0;
        for (int s2 = 0; s2 < S; ++s2) {
            const int e2 = r.slot_e[s2];
            if (e2 >= 0 && e2 < e && r.rank[s2] == 0)
                rows_before += r.count[s2], tiles_before += (r.count[s2] + mc - 1) / mc;
        }
        const int rank = r.rank[s], count = r.count[s];
        r.row_slot[rows_before + rank] = s;
        if (rank % mc == 0) {
            const int t = tiles_before + rank / mc;
            r.tile_e[t] = e, r.tile_row0[t] = rows_before + rank, r.tile_n[t] = min(mc, count - rank);
        }
        if (rank == 0) atomicAdd(&r.num_tiles, (count + mc - 1) / mc);
    }
    __syncthreads();
}

// ---- the work list -------------------------------------------------------------------------------------------
struct Unit {
    bool down;
    int tile, block;  // block: channel block (up) or 16-column block (down)
};

// Up units tile-major (a CTA's up units cover one or two tiles, whose h it publishes once each); down units
// column-block-major (a CTA's down units cover whole 16-column blocks, which it combines without any atomic, and at
// most two blocks it shares with its neighbours).
struct Plan {
    int64_t num_tiles, up_blocks, down_blocks;  // blocks per tile
    int64_t up_begin, up_count, down_begin, down_count;
    __device__ Unit unit(int64_t i) const {
        if (i < up_count) {
            const int64_t u = up_begin + i;
            return Unit{false, int(u / up_blocks), int(u % up_blocks)};
        }
        const int64_t u = down_begin + (i - up_count);
        return Unit{true, int(u % num_tiles), int(u / num_tiles)};
    }
    // Units of the CTA's run that share unit i's tile (up) or column block (down) and end with it: 0 unless unit i is
    // the last of that run (then the tile's h or the block's y from this CTA is complete).
    __device__ int64_t run_ending_at(int64_t i) const {
        const Unit u = unit(i);
        const int64_t end = u.down ? up_count + down_count : up_count;
        if (i + 1 < end) {
            const Unit n = unit(i + 1);
            if ((u.down ? n.block == u.block : n.tile == u.tile)) return 0;
        }
        const int64_t first = u.down ? max(up_count, i - u.tile) : max(int64_t(0), i - u.block);
        return i - first + 1;
    }
};

__device__ inline Plan make_plan(const StreamArgs& a, int num_tiles) {
    Plan p;
    p.num_tiles = num_tiles;
    p.up_blocks = a.has_gate ? (a.I + 7) / 8 : (a.I + 15) / 16;
    p.down_blocks = (a.H + 15) / 16;
    const int64_t nu = num_tiles * p.up_blocks, nd = num_tiles * p.down_blocks, G = gridDim.x, c = blockIdx.x;
    p.up_begin = c * nu / G, p.up_count = (c + 1) * nu / G - p.up_begin;
    p.down_begin = c * nd / G, p.down_count = (c + 1) * nd / G - p.down_begin;
    return p;
}

// Physical weight row of a unit's row j (0..15), -1 past the projection. Up, gated and concatenated: j < 8 gate
// channel c0 + j, else up channel c0 + j - 8 (row I + channel); gated interleaved: row 2 c0 + j; ungated: c0 + j.
__device__ __forceinline__ int64_t unit_row(const StreamArgs& a, const Unit& u, int j) {
    if (u.down) {
        const int64_t n = int64_t(u.block) * 16 + j;
        return n < a.H ? n : -1;
    }
    if (!a.has_gate) {
        const int64_t c = int64_t(u.block) * 16 + j;
        return c < a.I ? c : -1;
    }
    const int64_t c0 = int64_t(u.block) * 8;
    if (a.gate.concatenated) {
        const int64_t c = c0 + (j & 7);
        return c < a.I ? (j < 8 ? c : a.I + c) : -1;
    }
    const int64_t p = 2 * c0 + j;
    return p < 2 * a.I ? p : -1;
}

// ---- the consumers' and the epilogue warp's pieces --------------------------------------------------------------
// A stage (16 weight rows x L of K, the tile's token rows below them) into this warp's accumulators: the 32-deep
// k steps warp, warp + 8, ...; each thread 16 contiguous bytes of rows g and g + 8 and of token row g (batched.cuh's
// swap-AB trick). K past L (a tail shorter than one step) reads as zeros, not as the stage's stale bytes.
// acc[nt][0..3]: rows g / g + 8, token columns 8 nt + 2q, + 1 (the m16n8 fragment).
template <class T, int NT, int kPitch>
__device__ __forceinline__ void mma_chunk(const T* stage, int w_pitch, int L, int nrows, float (&acc)[NT][4]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const uint4 zero{0, 0, 0, 0};
    for (int st = warp; st < (L + 31) / 32; st += kConsumerWarps) {
        const int kk = st * 32 + 8 * q;
        const bool in = kk < L;
        const uint4 w0 = in ? *reinterpret_cast<const uint4*>(stage + g * w_pitch + kk) : zero;
        const uint4 w1 = in ? *reinterpret_cast<const uint4*>(stage + (g + 8) * w_pitch + kk) : zero;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            if (8 * nt >= nrows) break;
            const uint4 xv =
                in ? *reinterpret_cast<const uint4*>(stage + (kUnitRows + 8 * nt + g) * kPitch + kk) : zero;
            batched::mma16816<T>(acc[nt], w0.x, w1.x, w0.y, w1.y, xv.x, xv.y);
            batched::mma16816<T>(acc[nt], w0.z, w1.z, w0.w, w1.w, xv.z, xv.w);
        }
    }
}

// The consumer warps' partial sums of one unit, in warp order: red[warp][row][token column].
template <int NT>
struct Partials {
    float v[kConsumerWarps][kUnitRows][8 * NT];
    __device__ float sum(int j, int t) const {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < kConsumerWarps; ++w) s += v[w][j][t];
        return s;
    }
};

struct Tile {
    int e, nrows;
    const int* row_slot;  // (nrows,) slot of each token row
};

// h[slot, channel] = gate(gate + bias, up + bias), or act(up + bias) ungated, for the unit's channels.
template <class T, int NT>
__device__ void up_epilogue(const StreamArgs& a, const Unit& u, const Tile& tile, const Partials<NT>& p) {
    const int64_t N = a.has_gate ? 2 * a.I : a.I;
    const T* bias = a.b_up != nullptr ? static_cast<const T*>(a.b_up) + int64_t(tile.e) * N : nullptr;
    const int per = a.has_gate ? 8 : 16;
    for (int idx = threadIdx.x & 31; idx < per * tile.nrows; idx += 32) {
        const int j = idx / tile.nrows, t = idx % tile.nrows;
        const int64_t ch = int64_t(u.block) * per + j;
        if (ch >= a.I) continue;
        float v;
        if (a.has_gate) {
            const int jg = a.gate.concatenated ? j : 2 * j, ju = a.gate.concatenated ? 8 + j : 2 * j + 1;
            float gv = p.sum(jg, t), uv = p.sum(ju, t);
            if (bias != nullptr) gv += to_f32(bias[unit_row(a, u, jg)]), uv += to_f32(bias[unit_row(a, u, ju)]);
            v = apply_gate(a.gate, gv, uv);
        } else {
            v = apply_act(a.gate.activation, p.sum(j, t) + (bias != nullptr ? to_f32(bias[ch]) : 0.0f));
        }
        static_cast<T*>(a.h)[int64_t(tile.row_slot[t]) * a.I + ch] = from_f32<T>(v);
    }
}

// y[slot, n] = (acc + bias) * routing weight for the unit's 16 columns.
template <class T, int NT>
__device__ void down_epilogue(const StreamArgs& a, const Unit& u, const Tile& tile, const Partials<NT>& p) {
    const T* bias = a.b_down != nullptr ? static_cast<const T*>(a.b_down) + int64_t(tile.e) * a.H : nullptr;
    for (int idx = threadIdx.x & 31; idx < 16 * tile.nrows; idx += 32) {
        const int j = idx / tile.nrows, t = idx % tile.nrows;
        const int64_t n = int64_t(u.block) * 16 + j;
        if (n >= a.H) continue;
        const int64_t slot = tile.row_slot[t];
        a.y[slot * a.H + n] = (p.sum(j, t) + (bias != nullptr ? to_f32(bias[n]) : 0.0f)) *
                              load_weight(a.topk_w, a.weights_f32, a.dtype, slot);
    }
}

// out[t, n] = the sum of y over token t's routed slots in slot order (no float atomics), for one 16-column block.
template <class T>
__device__ void combine_block(const StreamArgs& a, int block) {
    const int64_t n0 = int64_t(block) * 16, cols = min(int64_t(16), a.H - n0);
    for (int64_t idx = threadIdx.x & 31; idx < a.T * cols; idx += 32) {
        const int64_t t = idx / cols, n = n0 + idx % cols;
        float v = 0.0f;
        for (int64_t j = 0; j < a.k; ++j) {
            const int64_t slot = t * a.k + j;
            if (load_expert(a.ids, a.ids_i64, slot, a.E) >= 0) v += __ldcg(a.y + slot * a.H + n);
        }
        static_cast<T*>(a.out)[t * a.H + n] = from_f32<T>(v);
    }
}

// ---- the kernel ------------------------------------------------------------------------------------------------
template <class T, int NT>
__global__ void __launch_bounds__(kThreads, 1) decode_stream_kernel(const __grid_constant__ StreamArgs a) {
    // pdl: late wait. Before pdl_enter() the CTA routes the ids and its producers fill the ring with weights and x
    // rows, all written at least two launches back; consumers, the h-row producer and the epilogue warp wait first.
    using R = Ring<NT>;
    constexpr int kChunk = R::kChunk, kPitch = R::kPitch;
    constexpr int kMc = R::kTokenRows, kStages = R::kStages;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* ring = reinterpret_cast<T*>(smem_raw);
    __shared__ __align__(8) uint64_t full[kStages], empty[kStages], red_full[kRed], red_empty[kRed];
    __shared__ Routes routes;
    __shared__ Partials<NT> red[kRed];
    __shared__ bool tile_ok[kMaxSlots];  // the h-row producer has seen the tile's h complete

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) sm90::mbar_init(&full[s], 1), sm90::mbar_init(&empty[s], kConsumerWarps);
        for (int b = 0; b < kRed; ++b)
            sm90::mbar_init(&red_full[b], kConsumerWarps * 32), sm90::mbar_init(&red_empty[b], 1);
        sm90::fence_mbarrier_init();
    }
    for (int t = threadIdx.x; t < kMaxSlots; t += blockDim.x) tile_ok[t] = false;
    route(a, routes, kMc);  // ids were written two launches back at least (pdl.cuh): readable before the wait
    const int num_tiles = routes.num_tiles;
    const Plan plan = make_plan(a, num_tiles);
    const int64_t units = plan.up_count + plan.down_count;
    const int64_t up_chunks = (a.H + kChunk - 1) / kChunk, down_chunks = (a.I + kChunk - 1) / kChunk;
    const int64_t N = a.has_gate ? 2 * a.I : a.I;

    if (warp == kConsumerWarps) {  // ---- weight producer
        int64_t it = 0;
        for (int64_t i = 0; i < units; ++i) {
            const Unit u = plan.unit(i);
            const int e = routes.tile_e[u.tile];
            const int64_t K = u.down ? a.I : a.H, R_ = u.down ? a.H : N, chunks = u.down ? down_chunks : up_chunks;
            const T* W = static_cast<const T*>(u.down ? a.w_down : a.w_up) + int64_t(e) * R_ * K;
            const int64_t p = lane < kUnitRows ? unit_row(a, u, lane) : -1;
            const unsigned present = __ballot_sync(0xffffffffu, p >= 0);
            // Runs of consecutive weight rows: gate rows and up rows of a concatenated gated unit, else all 16.
            const int runs = !u.down && a.has_gate && a.gate.concatenated ? 2 : 1;
            const int xrows = routes.tile_n[u.tile];
            for (int64_t c = 0; c < chunks; ++c, ++it) {
                const int s = int(it % kStages);
                const int64_t k0 = c * kChunk, L = min(int64_t(kChunk), K - k0);
                if (lane == 0) {
                    sm90::mbar_wait(&empty[s], uint32_t(((it / kStages) & 1) ^ 1));
                    sm90::mbar_arrive_expect_tx(&full[s], uint32_t((__popc(present) + xrows) * L * 2));
                }
                __syncwarp();
                T* stage = ring + int64_t(s) * R::kStageElems;
                if (K > kChunk) {  // a chunk of each row, one copy per row
                    if (p >= 0) bulk_copy_g2s(stage + lane * kPitch, W + p * K + k0, uint32_t(L * 2), &full[s]);
                } else if (lane == 0 || (lane == 8 && runs == 2)) {  // whole rows: each run of rows in one copy
                    const unsigned run = (present >> lane) & (runs == 2 ? 0xffu : 0xffffu);
                    if (run != 0) bulk_copy_g2s(stage + lane * K, W + p * K, uint32_t(__popc(run) * K * 2), &full[s]);
                }
            }
        }
        return;
    }
    if (warp == kConsumerWarps + 1) {  // ---- token-row producer
        int64_t it = 0;
        bool waited = false;
        for (int64_t i = 0; i < units; ++i) {
            const Unit u = plan.unit(i);
            const int xrows = routes.tile_n[u.tile];
            const int64_t slot = lane < xrows ? routes.row_slot[routes.tile_row0[u.tile] + lane] : -1;
            const int64_t K = u.down ? a.I : a.H, chunks = u.down ? down_chunks : up_chunks;
            const T* src = nullptr;
            if (slot >= 0)
                src =
                    u.down ? static_cast<const T*>(a.h) + slot * a.I : static_cast<const T*>(a.x) + (slot / a.k) * a.H;
            if (u.down && !tile_ok[u.tile]) {             // h rows of this tile: every up unit of it published
                if (!waited) pdl_enter(), waited = true;  // tile_done was zeroed by the kernel before
                if (lane == 0)
                    while (ld_acquire(a.tile_done + u.tile) < plan.up_blocks) __nanosleep(64);
                __syncwarp();
                fence_proxy_async_global();
                tile_ok[u.tile] = true;  // this warp alone reads and writes it
            }
            for (int64_t c = 0; c < chunks; ++c, ++it) {
                const int s = int(it % kStages);
                const int64_t k0 = c * kChunk, L = min(int64_t(kChunk), K - k0);
                if (lane == 0) sm90::mbar_wait(&empty[s], uint32_t(((it / kStages) & 1) ^ 1));
                __syncwarp();
                if (src != nullptr)
                    bulk_copy_g2s(ring + int64_t(s) * R::kStageElems + (kUnitRows + lane) * kPitch, src + k0,
                                  uint32_t(L * 2), &full[s]);
            }
        }
        if (!waited) pdl_enter();
        return;
    }
    if (warp == kConsumerWarps + 2) {  // ---- epilogue warp
        pdl_enter();                   // before the first global write
        if (num_tiles == 0) {          // every slot a sentinel: the output is zero
            const int64_t n = a.T * a.H, per = (n + gridDim.x - 1) / gridDim.x;
            for (int64_t i = blockIdx.x * per + lane; i < min(n, (blockIdx.x + 1) * per); i += 32)
                static_cast<T*>(a.out)[i] = from_f32<T>(0.0f);
            return;
        }
        for (int64_t i = 0; i < units; ++i) {
            const Unit u = plan.unit(i);
            const int b = int(i % kRed);
            sm90::mbar_wait(&red_full[b], uint32_t((i / kRed) & 1));
            const Tile tile{routes.tile_e[u.tile], routes.tile_n[u.tile], &routes.row_slot[routes.tile_row0[u.tile]]};
            if (u.down)
                down_epilogue<T, NT>(a, u, tile, red[b]);
            else
                up_epilogue<T, NT>(a, u, tile, red[b]);
            __syncwarp();
            if (lane == 0) sm90::mbar_arrive(&red_empty[b]);
            const int64_t run = plan.run_ending_at(i);
            if (run == 0) continue;
            if (!u.down) {  // this CTA's h rows of the tile are written: publish them for the down units' copies
                if (lane == 0) __threadfence(), atomicAdd(a.tile_done + u.tile, int(run));
                continue;
            }
            int last = run == num_tiles;  // the whole column block was this CTA's: its y rows are all here
            if (!last && lane == 0)
                __threadfence(), last = atomicAdd(a.col_arrive + u.block, int(run)) + run == num_tiles;
            if (!__shfl_sync(0xffffffffu, last, 0)) continue;
            __threadfence();
            combine_block<T>(a, u.block);
        }
        return;
    }

    // ---- consumers: 8 warps share every stage by k steps; a unit's partial sums go to the epilogue warp
    int64_t it = 0;
    for (int64_t i = 0; i < units; ++i) {
        const Unit u = plan.unit(i);
        const int nrows = routes.tile_n[u.tile];
        const int64_t K = u.down ? a.I : a.H, chunks = u.down ? down_chunks : up_chunks;
        float acc[NT][4] = {};
        for (int64_t c = 0; c < chunks; ++c, ++it) {
            const int s = int(it % kStages);
            sm90::mbar_wait(&full[s], uint32_t((it / kStages) & 1));
            const int w_pitch = K <= kChunk ? int(K) : kPitch;  // whole rows: the unit's runs copied as they lie
            mma_chunk<T, NT, kPitch>(ring + int64_t(s) * R::kStageElems, w_pitch,
                                     int(min(int64_t(kChunk), K - c * kChunk)), nrows, acc);
            __syncwarp();
            if (lane == 0) sm90::mbar_arrive(&empty[s]);
        }
        const int b = int(i % kRed), g = lane >> 2, q = lane & 3;
        sm90::mbar_wait(&red_empty[b], uint32_t(((i / kRed) & 1) ^ 1));
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int col = 8 * nt + 2 * q;
            red[b].v[warp][g][col] = acc[nt][0], red[b].v[warp][g][col + 1] = acc[nt][1];
            red[b].v[warp][g + 8][col] = acc[nt][2], red[b].v[warp][g + 8][col + 1] = acc[nt][3];
        }
        sm90::mbar_arrive(&red_full[b]);
    }
}

// Zeroes the counters of one decode_stream_kernel launch (the launch before it, so that its routing and ring overlap).
__global__ void __launch_bounds__(256) decode_stream_zero_kernel(int32_t* p, int64_t n) {
    pdl_enter();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) p[i] = 0;
}

}  // namespace moex::cuda::decode
