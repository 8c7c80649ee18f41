// Routed rows of one token chunk: which (token, slot) pairs each expert multiplies, in which order, and where each
// pair's result lands. Ids outside [0, E) get no row: they contribute exactly zero and never index anything.
#pragma once

#include <cstdint>
#include <vector>

#include "src/cpu/problem.h"

namespace moex::cpu {

struct Routing {
    std::vector<int64_t> expert;    // (G,)     expert of group g
    std::vector<int64_t> begin;     // (G + 1,) rows of group g are [begin[g], begin[g + 1])
    std::vector<int32_t> token;     // (rows,)  token of each row, relative to the chunk start
    std::vector<int64_t> slot_row;  // (chunk_T * k,) row holding (t, j), or -1 for a sentinel id
    bool gemv = false;              // route_by_slot: every group takes the streaming kernel (gemm.h gemm_path)
    int64_t rows() const { return begin.back(); }
    int64_t groups() const { return int64_t(expert.size()); }
};

// eager, grouped_mm: one group per hit expert in ascending id; rows in token-major order (a stable counting sort).
Routing route_by_expert(const CpuProblem& cp, int64_t t0, int64_t t1);
// batched_mm: one product per valid (token, slot) pair, duplicates separate. Pairs of one expert are grouped by up
// to max_rows in route_by_expert's order, for kernels whose every output is the same float sequence as a GEMV of
// its pair alone (the streaming kernels): the weights are then loaded once per group instead of once per pair.
Routing route_by_slot(const CpuProblem& cp, int64_t t0, int64_t t1, int64_t max_rows);

}  // namespace moex::cpu
