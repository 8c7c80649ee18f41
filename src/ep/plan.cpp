// Host planning of EP dispatch and combine: pure functions of the ids, unit-tested without any transport.
#include "src/ep/plan.h"

#include <cstring>

#include "moex/error.h"

namespace moex::ep {
namespace {

float weight_f32(const TensorView& w, int64_t t, int64_t j) {
    const int64_t off = t * w.strides[0] + j * w.strides[1];
    switch (w.dtype) {
        case DType::kF32: return w.ptr<const float>()[off];
        case DType::kBF16: return bf16_to_f32(w.ptr<const uint16_t>()[off]);
        case DType::kF16: return f16_to_f32(w.ptr<const uint16_t>()[off]);
        default: fail(ErrorCode::kInvalidArgument, "ep: top_k_weights must be float32, bfloat16 or float16");
    }
}

}  // namespace

DispatchPlan plan_dispatch(const TensorView& ids, const TensorView& weights, const EpShard& shard) {
    MOEX_REQUIRE(ids.device == Device::kCPU && weights.device == Device::kCPU, ErrorCode::kInvalidArgument,
                 "ep: the dispatch plan reads ids and weights on the host");
    DispatchPlan p;
    p.R = shard.ep_size, p.T = ids.shape[0], p.k = ids.shape[1], p.E_loc = shard.local();
    const int R = p.R;
    const int64_t T = p.T, k = p.k, E = shard.num_experts;
    // owner[t*k + j]: the rank owning slot (t, j), -1 for a dropped id.
    std::vector<int> owner(size_t(T * k));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < k; ++j) {
            const int64_t e = expert_id(ids, t, j);
            owner[size_t(t * k + j)] = e >= 0 && e < E ? shard.owner(e) : -1;
        }
    p.send_count.assign(size_t(R), 0);
    p.send_offset.assign(size_t(R) + 1, 0);
    p.slot_back_count.assign(size_t(R), 0);
    p.slot_row.assign(size_t(T * k), -1);
    p.rank_row.assign(size_t(T * R), -1);
    // Rank-major walk: rows and returned slot rows come out in the order the receivers process them.
    int64_t slot_base = 0;
    for (int d = 0; d < R; ++d) {
        p.send_offset[size_t(d)] = int64_t(p.send_token.size());
        const int64_t first_slot = slot_base;
        for (int64_t t = 0; t < T; ++t) {
            bool hit = false;
            for (int64_t j = 0; j < k; ++j) hit = hit || owner[size_t(t * k + j)] == d;
            if (!hit) continue;
            p.rank_row[size_t(t * R + d)] = int64_t(p.send_token.size());
            p.send_token.push_back(t);
            // meta row: k local ids, then k weights as f32 bits (one int32 array, one transfer).
            const size_t meta = p.send_meta.size();
            p.send_meta.resize(meta + size_t(2 * k));
            for (int64_t j = 0; j < k; ++j) {
                const bool mine = owner[size_t(t * k + j)] == d;
                const float w = mine ? weight_f32(weights, t, j) : 0.0f;
                p.send_meta[meta + size_t(j)] =
                    mine ? int32_t(expert_id(ids, t, j) - int64_t(d) * p.E_loc) : int32_t(p.E_loc);
                std::memcpy(&p.send_meta[meta + size_t(k + j)], &w, 4);
                if (mine) p.slot_row[size_t(t * k + j)] = slot_base++;
            }
        }
        p.send_count[size_t(d)] = int64_t(p.send_token.size()) - p.send_offset[size_t(d)];
        p.slot_back_count[size_t(d)] = slot_base - first_slot;
    }
    p.send_offset[size_t(R)] = int64_t(p.send_token.size());
    return p;
}

ReceivePlan plan_receive(const std::vector<int64_t>& recv_count, const int32_t* recv_meta, int64_t k, int64_t E_loc) {
    ReceivePlan p;
    p.slot_back_count.assign(recv_count.size(), 0);
    int64_t row = 0;
    for (size_t s = 0; s < recv_count.size(); ++s) {
        for (int64_t i = 0; i < recv_count[s]; ++i, ++row) {
            const int32_t* meta = recv_meta + row * 2 * k;
            for (int64_t j = 0; j < k; ++j) {
                const int32_t id = meta[j];
                if (id == E_loc) continue;  // the sentinel: a slot served by another rank
                MOEX_REQUIRE(id >= 0 && id < E_loc, ErrorCode::kInvalidArgument,
                             "ep: received local id " + std::to_string(id) + " outside [0, " + std::to_string(E_loc) +
                                 "]; the ranks disagree on the shard layout");
                p.slot_src.push_back(row);
                p.slot_id.push_back(id);
                ++p.slot_back_count[s];
            }
        }
    }
    p.rows = row;
    return p;
}

}  // namespace moex::ep
