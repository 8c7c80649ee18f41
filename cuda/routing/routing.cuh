// Routing kernels: a one-CTA fused kernel for decode-sized S (one launch), and count / scan / place kernels for
// large S. Both share the phases below, so both produce the same, deterministic, stable placement.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/routing/gather.cuh"
#include "cuda/routing/routing.h"

namespace moex::cuda::routing {

inline constexpr int kFusedMaxSlots = 4096;  // fused kernel: S ids cached in shared memory
// Multi-kernel path: slots per count/place CTA. Each chunk is placed by one warp in 32-slot steps, so the chunk sets
// the place kernel's time (4096 slots: 48 µs with 32 CTAs on 132 SMs at qwen3-30b-a3b T = 16384).
inline constexpr int kChunkSlots = 1024;
inline constexpr unsigned kFull = 0xffffffffu;

// Inclusive warp scan of a pair of ints.
__device__ __forceinline__ int2 warp_inclusive_scan2(int2 v) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
        const int a = __shfl_up_sync(kFull, v.x, d), b = __shfl_up_sync(kFull, v.y, d);
        if (lane >= d) v.x += a, v.y += b;
    }
    return v;
}

// Exclusive scan over n items of the block (blockDim.x a multiple of 32, <= 1024). f(i) gives the pair of item i;
// out(i, excl, own) receives its exclusive prefix. Returns the totals (same in every thread). Deterministic.
template <class F, class Out>
__device__ int2 block_exclusive_scan2(int n, F f, Out out) {
    __shared__ int2 warp_sums[32];
    __shared__ int2 carry_s;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    if (tid == 0) carry_s = make_int2(0, 0);
    __syncthreads();
    for (int base = 0; base < n; base += blockDim.x) {
        const int i = base + tid;
        const int2 own = i < n ? f(i) : make_int2(0, 0);
        const int2 inc = warp_inclusive_scan2(own);
        if (lane == 31) warp_sums[warp] = inc;
        __syncthreads();
        if (warp == 0) {
            int2 w = lane < nwarps ? warp_sums[lane] : make_int2(0, 0);
            w = warp_inclusive_scan2(w);
            if (lane < nwarps) warp_sums[lane] = w;  // inclusive prefix over warps
        }
        __syncthreads();
        const int2 carry = carry_s;
        const int2 before = warp > 0 ? warp_sums[warp - 1] : make_int2(0, 0);
        if (i < n) out(i, make_int2(carry.x + before.x + inc.x - own.x, carry.y + before.y + inc.y - own.y), own);
        __syncthreads();
        if (tid == 0) {
            const int2 tot = warp_sums[nwarps - 1];
            carry_s = make_int2(carry.x + tot.x, carry.y + tot.y);
        }
        __syncthreads();
    }
    return carry_s;
}

// Scan phase: from counts c_e (count(e)) to padded row starts, tiles, padding markers. Runs in ONE block.
// Also sets cursor[e] = row_start[e] when cursor != nullptr (shared memory of the fused kernel).
template <class Count>
__device__ void scan_phase(const RoutingArgs& a, Count count, int* cursor) {
    const int E = int(a.E), align = a.align, tr = a.tile_rows;
    const int2 tot = block_exclusive_scan2(
        E,
        [&](int e) {
            const int c = count(e);
            const int padded = (c + align - 1) / align * align;
            const int tiles = (c + tr - 1) / tr;
            return make_int2(padded, tiles);
        },
        [&](int e, int2 excl, int2 own) {
            const int c = count(e), rs = excl.x, ts = excl.y;
            a.expert_count[e] = c;
            a.expert_row_start[e] = rs;
            if (cursor != nullptr) cursor[e] = rs;
            if (a.expert_tile_start != nullptr) a.expert_tile_start[e] = ts;
            for (int t = 0; t < own.y; ++t) {
                a.tile_expert[ts + t] = e;
                if (a.tile_row0 != nullptr) a.tile_row0[ts + t] = rs + t * tr;
                if (a.tile_nrows != nullptr) a.tile_nrows[ts + t] = min(tr, c - t * tr);
            }
            for (int r = rs + c; r < rs + own.x; ++r) a.row_slot[r] = -1;  // padding rows of this block
        });
    if (threadIdx.x == 0) {
        a.expert_row_start[E] = tot.x;
        *a.num_tiles = tot.y;
        if (a.expert_tile_start != nullptr) a.expert_tile_start[E] = tot.y;
    }
    for (int i = threadIdx.x; i < a.n_zero; i += blockDim.x) a.zero[i] = 0;
}

// Place phase, one warp, slots [s0, s1) in order: a slot's row is cursor[e] + (earlier slots of e in this step).
// Stable: slots of one expert get rows in increasing s. `expert_of(s)` reads the cached expert (-1 = sentinel).
template <class ExpertOf>
__device__ void place_phase_warp(const RoutingArgs& a, int64_t s0, int64_t s1, ExpertOf expert_of, int* cursor) {
    const int lane = threadIdx.x & 31;
    const unsigned lt = (1u << lane) - 1u;
    for (int64_t base = s0; base < s1; base += 32) {
        const int64_t s = base + lane;
        const int e = s < s1 ? expert_of(s) : -1;
        const unsigned peers = __match_any_sync(kFull, e);
        const int leader = __ffs(peers) - 1;
        const int mine = (lane == leader && e >= 0) ? cursor[e] : 0;
        const int row0 = __shfl_sync(kFull, mine, leader);
        if (s < s1) {
            if (e >= 0) {
                const int row = row0 + __popc(peers & lt);
                a.slot_row[s] = row;
                a.row_slot[row] = int(s);
            } else {
                a.slot_row[s] = -1;
            }
        }
        if (lane == leader && e >= 0) cursor[e] = row0 + __popc(peers);
        __syncwarp();
    }
}

// One CTA does everything (S <= kFusedMaxSlots): count in shared memory, scan, place with warp 0.
// Dynamic shared memory: (E + S) ints.
__global__ void __launch_bounds__(1024) route_fused_kernel(const __grid_constant__ RoutingArgs a) {
    // Launched by launch_pdl: wait for the ids, then let the decode projection's CTAs be scheduled (they wait for our
    // results themselves).
    pdl_enter();
    extern __shared__ int smem[];
    int* hist = smem;          // (E,) counts, then cursors
    int* slot_e = smem + a.E;  // (S,) expert of each slot
    for (int e = threadIdx.x; e < a.E; e += blockDim.x) hist[e] = 0;
    __syncthreads();
    for (int s = threadIdx.x; s < a.S; s += blockDim.x) {
        const int e = load_expert(a.ids, a.ids_i64, s, a.E);
        slot_e[s] = e;
        if (e >= 0) atomicAdd(&hist[e], 1);  // integer counts: order-independent, deterministic
    }
    __syncthreads();
    // Each e is read (count) and then overwritten (cursor) by the same thread inside the scan.
    scan_phase(
        a, [&](int e) { return hist[e]; }, hist);
    __syncthreads();
    if (threadIdx.x < 32)
        place_phase_warp(
            a, 0, a.S, [&](int64_t s) { return slot_e[s]; }, hist);
}

// Multi-kernel path, 1/3: per-chunk histograms into scratch (E, C), expert-major.
__global__ void __launch_bounds__(256) route_count_kernel(const __grid_constant__ RoutingArgs a, int num_chunks) {
    extern __shared__ int hist[];  // (E,)
    const int c = blockIdx.x;
    for (int e = threadIdx.x; e < a.E; e += blockDim.x) hist[e] = 0;
    __syncthreads();
    const int64_t s0 = int64_t(c) * kChunkSlots, s1 = min(a.S, s0 + kChunkSlots);
    for (int64_t s = s0 + threadIdx.x; s < s1; s += blockDim.x) {
        const int e = load_expert(a.ids, a.ids_i64, s, a.E);
        if (e >= 0) atomicAdd(&hist[e], 1);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < a.E; e += blockDim.x) a.scratch[int64_t(e) * num_chunks + c] = hist[e];
}

// 2/3 (one CTA): per expert, exclusive scan over chunks in place (scratch becomes chunk offsets), then scan_phase.
__global__ void __launch_bounds__(1024) route_scan_kernel(const __grid_constant__ RoutingArgs a, int num_chunks) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (int e = warp; e < a.E; e += nwarps) {
        int* col = a.scratch + int64_t(e) * num_chunks;
        int carry = 0;
        for (int base = 0; base < num_chunks; base += 32) {
            const int c = base + lane;
            const int v = c < num_chunks ? col[c] : 0;
            int inc = v;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const int t = __shfl_up_sync(kFull, inc, d);
                if (lane >= d) inc += t;
            }
            if (c < num_chunks) col[c] = carry + inc - v;
            carry += __shfl_sync(kFull, inc, 31);
        }
        if (lane == 0) a.expert_count[e] = carry;
    }
    __syncthreads();
    scan_phase(
        a, [&](int e) { return a.expert_count[e]; }, nullptr);
}

// 3/3: one CTA per chunk: its threads load the chunk's experts and the cursors (row_start + chunk offset), then warp 0
// places the chunk's slots in order (stable). One warp loading the chunk alone waited on its loads one after another.
inline constexpr int kPlaceThreads = 256;
__global__ void __launch_bounds__(kPlaceThreads)
    route_place_kernel(const __grid_constant__ RoutingArgs a, int num_chunks) {
    extern __shared__ int smem[];
    int* cursor = smem;        // (E,)
    int* slot_e = smem + a.E;  // (kChunkSlots,)
    const int c = blockIdx.x;
    for (int e = threadIdx.x; e < a.E; e += blockDim.x)
        cursor[e] = a.expert_row_start[e] + a.scratch[int64_t(e) * num_chunks + c];
    const int64_t s0 = int64_t(c) * kChunkSlots, s1 = min(a.S, s0 + kChunkSlots);
    for (int64_t s = s0 + threadIdx.x; s < s1; s += blockDim.x) slot_e[s - s0] = load_expert(a.ids, a.ids_i64, s, a.E);
    __syncthreads();
    if (threadIdx.x < 32)
        place_phase_warp(
            a, s0, s1, [&](int64_t s) { return slot_e[s - s0]; }, cursor);
}

// Row gather, token-major: one warp per token reads its x row once and writes it to the rows of its k slots, then
// the padding rows get zeros and weight 0. Walking the destination rows instead read each token's row k times, from
// DRAM once x outgrows L2 (qwen3-30b-a3b T = 16384 on an H100: 448 MB read for a 67 MB x; 997 MB moved in 354 µs).
// A lane keeps kGatherBatch 16-byte chunks in flight (kVec16: rows 16-byte aligned), else one 16-bit value.
inline constexpr int kGatherBatch = 8;

// Lane j < nrows holds `row`, the destination of the token's slot j (-1: none). Loop bounds are uniform over the warp
// (the shuffles need every lane).
template <bool kVec16>
__device__ __forceinline__ void copy_token(const GatherArgs& g, int64_t row_bytes, const char* src, int row, int nrows,
                                           int lane) {
    char* A = static_cast<char*>(g.A);
    if constexpr (kVec16) {
        const int64_t n = row_bytes / 16;
        const uint4* from = reinterpret_cast<const uint4*>(src);
        for (int64_t c0 = 0; c0 < n; c0 += 32 * kGatherBatch) {
            uint4 v[kGatherBatch];
#pragma unroll
            for (int b = 0; b < kGatherBatch; ++b) {
                const int64_t i = c0 + 32 * b + lane;
                v[b] = i < n ? __ldg(from + i) : uint4{};
            }
            for (int j = 0; j < nrows; ++j) {
                const int r = __shfl_sync(kFull, row, j);
                if (r < 0) continue;
                uint4* to = reinterpret_cast<uint4*>(A + int64_t(r) * row_bytes);
#pragma unroll
                for (int b = 0; b < kGatherBatch; ++b)
                    if (c0 + 32 * b + lane < n) to[c0 + 32 * b + lane] = v[b];
            }
        }
    } else {
        const int64_t n = row_bytes / 2;  // every dtype is a multiple of 2 bytes
        for (int64_t c0 = 0; c0 < n; c0 += 32) {
            const int64_t i = c0 + lane;
            const uint16_t v = i < n ? reinterpret_cast<const uint16_t*>(src)[i] : uint16_t(0);
            for (int j = 0; j < nrows; ++j) {
                const int r = __shfl_sync(kFull, row, j);
                if (r >= 0 && i < n) reinterpret_cast<uint16_t*>(A + int64_t(r) * row_bytes)[i] = v;
            }
        }
    }
}

template <bool kVec16>
__global__ void __launch_bounds__(256) gather_rows_kernel(const __grid_constant__ GatherArgs g, int64_t row_bytes) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
    const int64_t warp = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    for (int64_t t = warp; t < g.T; t += warps) {
        const char* src = static_cast<const char*>(g.x) + t * row_bytes;
        for (int64_t j0 = 0; j0 < g.k; j0 += 32) {
            const TokenSlots slots = token_slots(g, t, j0, lane);
            copy_token<kVec16>(g, row_bytes, src, slots.row, slots.nrows, lane);
            set_row_weight(g, slots);
        }
    }
    clear_padding_rows(g, warp, warps, lane, [&](int64_t p) {
        char* dst = static_cast<char*>(g.A) + p * row_bytes;
        if (kVec16) {
            for (int64_t i = lane; i < row_bytes / 16; i += 32) reinterpret_cast<uint4*>(dst)[i] = uint4{};
        } else {
            for (int64_t i = lane; i < row_bytes / 2; i += 32) reinterpret_cast<uint16_t*>(dst)[i] = 0;
        }
    });
}

}  // namespace moex::cuda::routing
