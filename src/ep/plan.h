// The dispatch/combine plan of one EP call, computed on the host from the global ids: which token rows go to which
// rank (rank order, then token order), their local ids with sentinels, and where each result comes back.
#pragma once

#include <cstdint>
#include <vector>

#include "moex/ep.h"

namespace moex::ep {

// The sending side (this rank's T tokens). Rows are grouped by destination rank d = 0..R-1, tokens ascending.
struct DispatchPlan {
    int R = 1;
    int64_t T = 0, k = 0, E_loc = 0;
    std::vector<int64_t> send_count;       // (R) token rows to rank d: tokens with >= 1 slot owned by d
    std::vector<int64_t> send_offset;      // (R + 1) prefix sums of send_count
    std::vector<int64_t> send_token;       // (rows) source token of each packed row
    std::vector<int32_t> send_meta;        // (rows, 2k) local ids (sentinel E_loc elsewhere), then f32 weight bits
    std::vector<int64_t> slot_back_count;  // (R) slot rows rank d returns under kSlotOrder
    std::vector<int64_t> slot_row;         // (T, k) returned slot row of (t, j) under kSlotOrder; -1: dropped id
    std::vector<int64_t> rank_row;         // (T, R) returned partial row of token t from rank d under kRankOrder; -1
};

// ids (T, k) i32|i64 and weights (T, k) f32|bf16|f16, host. Ids outside [0, E) are dropped (contribute zero).
DispatchPlan plan_dispatch(const TensorView& ids, const TensorView& weights, const EpShard& shard);

// The receiving side: rows arrive grouped by source rank s = 0..R-1. Under kSlotOrder each row is expanded into one
// row per local slot (row ascending, slot ascending), which is exactly the order the source expects back.
struct ReceivePlan {
    int64_t rows = 0;                      // received token rows
    std::vector<int64_t> slot_src;         // (slot rows) received row of each expanded row
    std::vector<int32_t> slot_id;          // (slot rows) its local expert id
    std::vector<int64_t> slot_back_count;  // (R) expanded rows per source rank, the combine counts
};
ReceivePlan plan_receive(const std::vector<int64_t>& recv_count, const int32_t* recv_meta, int64_t k, int64_t E_loc);

}  // namespace moex::ep
