// Device pieces shared by the two token-major gathers (routing.cuh gather_rows_kernel, cuda/experts/act_quant.cu
// gather_act_quant_kernel): a token's slots taken 32 at a time, one lane each, and the pass over the padding rows.
#pragma once

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/routing/routing.h"

namespace moex::cuda::routing {

// Slots t·k + j0 .. + nrows - 1 of token t: lane j < nrows holds slot t·k + j0 + j and its row (-1: a sentinel id,
// or a lane past nrows).
struct TokenSlots {
    int64_t slot;
    int row;
    int nrows;
};
__device__ __forceinline__ TokenSlots token_slots(const GatherArgs& g, int64_t t, int64_t j0, int lane) {
    const int nrows = g.k - j0 < 32 ? int(g.k - j0) : 32;
    const int64_t slot = t * g.k + j0 + lane;
    return {slot, lane < nrows ? g.slot_row[slot] : -1, nrows};
}

// Each lane's row gets its slot's routing weight (where the gather writes row_scale).
__device__ __forceinline__ void set_row_weight(const GatherArgs& g, const TokenSlots& s) {
    if (s.row >= 0 && g.row_scale != nullptr)
        g.row_scale[s.row] = load_weight(g.topk_weights, g.weights_f32, g.dtype, s.slot);
}

// The padding rows below *total_rows (row_slot -1), and the tail_rows rows from there (below rows_bound), get weight
// 0 and `clear(row)`, called by the whole warp: a warp checks 32 of its rows (warp + i·warps) at once, then clears
// each padding row among them.
template <class Clear>
__device__ __forceinline__ void clear_padding_rows(const GatherArgs& g, int64_t warp, int64_t warps, int lane,
                                                   Clear clear) {
    const int total = *g.total_rows;
    const int64_t end = total + g.tail_rows < g.rows_bound ? total + g.tail_rows : g.rows_bound;
    for (int64_t r0 = warp; r0 < end; r0 += 32 * warps) {
        const int64_t r = r0 + lane * warps;
        unsigned pad = __ballot_sync(0xffffffffu, r < end && (r >= total || g.row_slot[r] < 0));
        if (g.row_scale != nullptr && (pad >> lane & 1u)) g.row_scale[r] = 0.0f;
        for (; pad != 0; pad &= pad - 1) clear(r0 + int64_t(__ffs(pad) - 1) * warps);
    }
}

}  // namespace moex::cuda::routing
