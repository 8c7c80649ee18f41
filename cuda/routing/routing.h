// Device routing for the experts pipelines: (T, k) ids -> per-expert counts, padded row blocks, work tiles and the
// slot <-> row maps (stable: inside an expert rows follow the slot order s = t*k + j), plus the row gather of x.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/common/device.h"
#include "moex/dtype.h"

namespace moex::cuda {

// Row space and tile bounds the host can compute without reading the routing back.
// Every non-empty expert block is rounded up to `align` rows, so P <= S + min(E, S) * (align - 1).
inline int64_t routing_rows_bound(int64_t S, int64_t E, int64_t align) {
    const int64_t p = S + std::min(E, S) * (align - 1);
    return (p + align - 1) / align * align;
}
// Tiles of `tile_rows` rows: exactly P / tile_rows when tile_rows == align, else sum ceil(c_e / tile_rows) over the
// non-empty experts, which is at most ceil(S / tile_rows) + min(E, S).
inline int64_t routing_tiles_bound(int64_t S, int64_t E, int64_t align, int64_t tile_rows) {
    if (tile_rows == align) return routing_rows_bound(S, E, align) / align;
    return (S + tile_rows - 1) / tile_rows + std::min(E, S);
}
int64_t routing_scratch_ints(int64_t S, int64_t E);  // size of RoutingArgs::scratch

struct RoutingArgs {
    const void* ids;  // (S,) = (T, k) flattened; int32 | int64 (ids_i64); values outside [0, E) are sentinels
    bool ids_i64;
    int64_t S, E;
    int32_t align;               // each expert's row block starts at a multiple of this (kRowAlign or 1)
    int32_t tile_rows;           // rows per work tile; either == align or align == 1
    int32_t* expert_count;       // (E,)     real rows of each expert
    int32_t* expert_row_start;   // (E + 1,) padded start of each expert block; [E] = rows used
    int32_t* tile_expert;        // (tiles_bound,) expert of each tile, experts ascending
    int32_t* tile_row0;          // (tiles_bound,) first row of each tile, or nullptr
    int32_t* tile_nrows;         // (tiles_bound,) real rows in each tile, or nullptr
    int32_t* expert_tile_start;  // (E + 1,) first tile of each expert, [E] = tiles (the GEMM's expert-aligned raster)
    int32_t* num_tiles;          // (1,)
    int32_t* slot_row;           // (S,)          padded row of slot s, -1 for a sentinel slot
    int32_t* row_slot;           // (rows_bound,) slot of row r, -1 for a padding row (rows < expert_row_start[E])
    int32_t* zero;               // (n_zero,) ints zeroed on the way (arrival counters of later kernels), or nullptr
    int32_t n_zero;
    int32_t* scratch;  // (routing_scratch_ints(S, E),)
};
void launch_routing(const RoutingArgs& args, cudaStream_t stream);

// The routing buffers of one experts call inside the call's Workspace: reserve_routing before ws.allocate(), args()
// after it. Every size is a host bound (rows_bound, tiles_bound), so nothing is read back.
struct RoutingBuffers {
    int64_t S, E, rows_bound, tiles_bound;
    int32_t align, tile_rows, n_zero;
    bool tile_ranges;
    size_t count, row_start, tile_expert, tile_row0, tile_nrows, expert_tile_start, num_tiles, slot_row, row_slot,
        scratch, zero;

    RoutingArgs args(const Workspace& ws, const void* ids, bool ids_i64) const;
};
// tile_ranges: also the first row and row count of each tile (the decode kernels walk tiles, not expert blocks).
// n_zero: ints the routing kernel zeroes on its way (arrival counters of the kernels after it).
RoutingBuffers reserve_routing(Workspace& ws, int64_t S, int64_t E, int32_t align, int32_t tile_rows,
                               bool tile_ranges = false, int32_t n_zero = 0);

// A[r, :] = x[row_slot[r] / k, :] for the used rows, zero for padding rows; row_scale[r] = routing weight (0 for
// padding). Rows at or past *total_rows are not touched (no tile of the padded layout reads them), except the
// tail_rows rows from there (below rows_bound), cleared as padding rows: the packed layout's last tile reads up to
// kRowAlign - 1 rows past the last expert's. Both gathers (launch_gather_rows, launch_gather_act_quant) walk the
// tokens through slot_row, each x row read once and written to its slots' rows, then the padding rows (row_slot).
struct GatherArgs {
    const void* x;              // (T, H) dtype
    void* A;                    // (rows_bound, H) dtype
    float* row_scale;           // (rows_bound,) or nullptr
    const void* topk_weights;   // (S,) float32 (weights_f32) | dtype
    const int32_t* row_slot;    // (rows_bound,)
    const int32_t* slot_row;    // (S = T·k,): the row of each slot, -1 for a sentinel id
    const int32_t* total_rows;  // (1,) = expert_row_start + E
    int64_t rows_bound, H, k, T;
    DType dtype;
    bool weights_f32;
    int64_t tail_rows = 0;
};
void launch_gather_rows(const GatherArgs& args, cudaStream_t stream);
// The warps both gathers want: one per token, or per row where the padding rows outnumber the tokens (small T, many
// experts). Checks slot_row, T and k first, failing with `what` in the message.
int64_t gather_warps(const GatherArgs& args, const char* what);

}  // namespace moex::cuda
