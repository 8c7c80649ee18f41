// Counting sort of the (token, slot) pairs by expert, and batched_mm's pairs grouped for the streaming kernels.
#include "src/cpu/routing.h"

#include <algorithm>

namespace moex::cpu {
namespace {

// The pair's expert, or -1 when the id is a sentinel (negative, >= E, or anything huge).
inline int64_t valid_id(const CpuProblem& cp, int64_t t, int64_t j) {
    const int64_t id = expert_id(cp.ids, t, j);
    return id >= 0 && id < cp.E ? id : -1;
}

}  // namespace

Routing route_by_expert(const CpuProblem& cp, int64_t t0, int64_t t1) {
    Routing r;
    const int64_t n = (t1 - t0) * cp.k;
    std::vector<int64_t> count(size_t(cp.E), 0);
    r.slot_row.assign(size_t(n), -1);
    for (int64_t s = 0; s < n; ++s) {
        const int64_t e = valid_id(cp, t0 + s / cp.k, s % cp.k);
        r.slot_row[size_t(s)] = e;  // the expert for now, its row below
        if (e >= 0) ++count[size_t(e)];
    }
    std::vector<int64_t> cursor(size_t(cp.E), 0);
    r.begin.push_back(0);
    for (int64_t e = 0; e < cp.E; ++e) {
        if (count[size_t(e)] == 0) continue;
        cursor[size_t(e)] = r.begin.back();
        r.expert.push_back(e);
        r.begin.push_back(r.begin.back() + count[size_t(e)]);
    }
    r.token.resize(size_t(r.rows()));
    for (int64_t s = 0; s < n; ++s) {
        const int64_t e = r.slot_row[size_t(s)];
        if (e < 0) continue;
        const int64_t row = cursor[size_t(e)]++;
        r.token[size_t(row)] = int32_t(s / cp.k);
        r.slot_row[size_t(s)] = row;
    }
    return r;
}

Routing route_by_slot(const CpuProblem& cp, int64_t t0, int64_t t1, int64_t max_rows) {
    Routing r = route_by_expert(cp, t0, t1);
    std::vector<int64_t> expert, begin{0};
    for (int64_t g = 0; g < r.groups(); ++g)
        for (int64_t row = r.begin[size_t(g)], end = r.begin[size_t(g) + 1]; row < end; row += max_rows) {
            expert.push_back(r.expert[size_t(g)]);
            begin.push_back(std::min(row + max_rows, end));
        }
    r.expert = std::move(expert);
    r.begin = std::move(begin);
    r.gemv = true;
    return r;
}

}  // namespace moex::cpu
