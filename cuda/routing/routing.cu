// Launchers of the routing kernels: one fused CTA when S <= 4096 (decode: a single launch), else count / scan /
// place over 1024-slot chunks; and the row gather into the expert-sorted rows (packed or padded).
#include <algorithm>
#include <string>

#include "cuda/common/align.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/pdl.cuh"
#include "cuda/routing/routing.cuh"

namespace moex::cuda {

using routing::kChunkSlots;
using routing::kFusedMaxSlots;

int64_t routing_scratch_ints(int64_t S, int64_t E) { return E * std::max<int64_t>(1, ceil_div(S, kChunkSlots)); }

RoutingBuffers reserve_routing(Workspace& ws, int64_t S, int64_t E, int32_t align, int32_t tile_rows, bool tile_ranges,
                               int32_t n_zero) {
    RoutingBuffers b{};
    b.S = S, b.E = E, b.align = align, b.tile_rows = tile_rows, b.n_zero = n_zero, b.tile_ranges = tile_ranges;
    b.rows_bound = routing_rows_bound(S, E, align);
    b.tiles_bound = routing_tiles_bound(S, E, align, tile_rows);
    b.count = ws.reserve_n<int32_t>(E);
    b.row_start = ws.reserve_n<int32_t>(E + 1);
    b.tile_expert = ws.reserve_n<int32_t>(b.tiles_bound);
    b.tile_row0 = tile_ranges ? ws.reserve_n<int32_t>(b.tiles_bound) : 0;
    b.tile_nrows = tile_ranges ? ws.reserve_n<int32_t>(b.tiles_bound) : 0;
    b.expert_tile_start = ws.reserve_n<int32_t>(E + 1);
    b.num_tiles = ws.reserve_n<int32_t>(1);
    b.slot_row = ws.reserve_n<int32_t>(S);
    b.row_slot = ws.reserve_n<int32_t>(b.rows_bound);
    b.scratch = ws.reserve_n<int32_t>(routing_scratch_ints(S, E));
    b.zero = n_zero > 0 ? ws.reserve_n<int32_t>(n_zero) : 0;
    return b;
}

RoutingArgs RoutingBuffers::args(const Workspace& ws, const void* ids, bool ids_i64) const {
    return RoutingArgs{
        .ids = ids,
        .ids_i64 = ids_i64,
        .S = S,
        .E = E,
        .align = align,
        .tile_rows = tile_rows,
        .expert_count = ws.at<int32_t>(count),
        .expert_row_start = ws.at<int32_t>(row_start),
        .tile_expert = ws.at<int32_t>(tile_expert),
        .tile_row0 = tile_ranges ? ws.at<int32_t>(tile_row0) : nullptr,
        .tile_nrows = tile_ranges ? ws.at<int32_t>(tile_nrows) : nullptr,
        .expert_tile_start = ws.at<int32_t>(expert_tile_start),
        .num_tiles = ws.at<int32_t>(num_tiles),
        .slot_row = ws.at<int32_t>(slot_row),
        .row_slot = ws.at<int32_t>(row_slot),
        .zero = n_zero > 0 ? ws.at<int32_t>(zero) : nullptr,
        .n_zero = n_zero,
        .scratch = ws.at<int32_t>(scratch),
    };
}

void launch_routing(const RoutingArgs& a, cudaStream_t stream) {
    MOEX_REQUIRE(a.S > 0 && a.S < (int64_t(1) << 30) && a.E > 0 && a.E < (int64_t(1) << 24), ErrorCode::kUnsupported,
                 "routing supports 0 < T*k < 2^30 and 0 < E < 2^24");
    MOEX_REQUIRE(a.align >= 1 && a.tile_rows >= 1 && (a.align == 1 || a.align == a.tile_rows),
                 ErrorCode::kInvalidArgument, "routing: tile_rows must equal align, or align must be 1");
    const size_t fused_smem = size_t(a.E + a.S) * sizeof(int);
    if (a.S <= kFusedMaxSlots && fused_smem <= 48 * 1024) {
        launch_pdl(routing::route_fused_kernel, dim3(1), dim3(1024), fused_smem, stream, a);
        return;
    }
    const int chunks = int(ceil_div(a.S, kChunkSlots));
    const size_t count_smem = size_t(a.E) * sizeof(int);
    const size_t place_smem = size_t(a.E + kChunkSlots) * sizeof(int);
    allow_dynamic_smem(routing::route_count_kernel, count_smem);
    allow_dynamic_smem(routing::route_place_kernel, place_smem);
    routing::route_count_kernel<<<chunks, 256, count_smem, stream>>>(a, chunks);
    MOEX_LAUNCH_CHECK();
    routing::route_scan_kernel<<<1, 1024, 0, stream>>>(a, chunks);
    MOEX_LAUNCH_CHECK();
    routing::route_place_kernel<<<chunks, routing::kPlaceThreads, place_smem, stream>>>(a, chunks);
    MOEX_LAUNCH_CHECK();
}

int64_t gather_warps(const GatherArgs& g, const char* what) {
    MOEX_REQUIRE(g.slot_row != nullptr && g.T >= 0 && g.k >= 1, ErrorCode::kInvalidArgument,
                 std::string(what) + ": slot_row, T >= 0 and k >= 1 are required");
    return std::max(g.T, g.rows_bound);
}

void launch_gather_rows(const GatherArgs& g, cudaStream_t stream) {
    const int64_t warps_needed = gather_warps(g, "gather");
    const int64_t esize = dtype_size(g.dtype);
    const int64_t row_bytes = g.H * esize;
    const bool vec = row_bytes % 16 == 0 && is_aligned16(g.x) && is_aligned16(g.A);
    const int64_t max_blocks = int64_t(device_state().sm_count) * 8;
    const int blocks = int(std::max<int64_t>(1, std::min(ceil_div(warps_needed, 8), max_blocks)));
    if (vec) {
        routing::gather_rows_kernel<true><<<blocks, 256, 0, stream>>>(g, row_bytes);
    } else {
        routing::gather_rows_kernel<false><<<blocks, 256, 0, stream>>>(g, row_bytes);
    }
    MOEX_LAUNCH_CHECK();
}

}  // namespace moex::cuda
