// Expert sharding by rank and the reference EP router (global ids -> local ids, sentinel E_loc, weight 0).
#include <string>

#include "moex/ep.h"
#include "moex/error.h"

namespace moex {

EpShard make_ep_shard(int64_t num_experts, int ep_size, int rank) {
    MOEX_REQUIRE(ep_size >= 1, ErrorCode::kInvalidArgument, "ep_size must be >= 1, got " + std::to_string(ep_size));
    MOEX_REQUIRE(rank >= 0 && rank < ep_size, ErrorCode::kInvalidArgument,
                 "ep rank " + std::to_string(rank) + " is outside [0, " + std::to_string(ep_size) + ")");
    MOEX_REQUIRE(num_experts >= 1 && num_experts % ep_size == 0, ErrorCode::kInvalidArgument,
                 "num_experts must be divisible by ep_size: num_experts=" + std::to_string(num_experts) +
                     ", ep_size=" + std::to_string(ep_size));
    return EpShard{num_experts, ep_size, rank};
}

ExpertsProblem shard_experts(const ExpertsProblem& full, const EpShard& shard) {
    MOEX_REQUIRE(full.E() == shard.num_experts, ErrorCode::kInvalidArgument,
                 "shard_experts: the problem has " + std::to_string(full.E()) + " experts, the shard expects " +
                     std::to_string(shard.num_experts));
    auto slice = [&](TensorView t) {  // dim 0 rows [first, first + local): a pointer offset, no copy
        if (!t.defined()) return t;
        t.data = static_cast<char*>(t.data) + shard.first() * t.strides[0] * dtype_size(t.dtype);
        t.shape[0] = shard.local();
        return t;
    };
    ExpertsProblem p = full;
    p.gate_up_proj = slice(full.gate_up_proj);
    p.down_proj = slice(full.down_proj);
    p.gate_up_bias = slice(full.gate_up_bias);
    p.down_bias = slice(full.down_bias);
    for (ProjectionQuant* q : {&p.quant.gate_up, &p.quant.down}) {  // quantized: the scales of the local experts
        q->scale_inv = slice(q->scale_inv);
        q->global_scale = slice(q->global_scale);
        q->activation_scale = slice(q->activation_scale);
    }
    return p;
}

void ep_route_local(const TensorView& global_ids, const TensorView& weights, const EpShard& shard,
                    const TensorView& local_ids, const TensorView& local_weights) {
    MOEX_REQUIRE(global_ids.device == Device::kCPU && local_ids.device == Device::kCPU &&
                     weights.device == Device::kCPU && local_weights.device == Device::kCPU,
                 ErrorCode::kInvalidArgument, "ep_route_local works on host tensors");
    MOEX_REQUIRE(global_ids.ndim == 2 && weights.ndim == 2 && local_ids.ndim == 2 && local_weights.ndim == 2 &&
                     weights.shape[0] == global_ids.shape[0] && weights.shape[1] == global_ids.shape[1] &&
                     local_ids.shape[0] == global_ids.shape[0] && local_ids.shape[1] == global_ids.shape[1] &&
                     local_weights.shape[0] == global_ids.shape[0] && local_weights.shape[1] == global_ids.shape[1] &&
                     local_ids.dtype == global_ids.dtype && local_weights.dtype == weights.dtype,
                 ErrorCode::kInvalidArgument, "ep_route_local: ids and weights must be (T, k), outputs alike");
    const int64_t T = global_ids.shape[0], k = global_ids.shape[1], lo = shard.first(), n = shard.local();
    const int64_t es = dtype_size(weights.dtype);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < k; ++j) {
            const int64_t e = expert_id(global_ids, t, j);
            const bool local = e >= lo && e < lo + n;
            const int64_t id = local ? e - lo : n;  // the sentinel is E_loc == the shard's num_experts
            const int64_t io = t * local_ids.strides[0] + j * local_ids.strides[1];
            if (local_ids.dtype == DType::kI64)
                local_ids.ptr<int64_t>()[io] = id;
            else
                local_ids.ptr<int32_t>()[io] = int32_t(id);
            const char* src =
                static_cast<const char*>(weights.data) + (t * weights.strides[0] + j * weights.strides[1]) * es;
            char* dst = static_cast<char*>(local_weights.data) +
                        (t * local_weights.strides[0] + j * local_weights.strides[1]) * es;
            if (local) {
                if (dst != src)
                    for (int64_t b = 0; b < es; ++b) dst[b] = src[b];
            } else {
                for (int64_t b = 0; b < es; ++b) dst[b] = 0;  // +0.0 in every float format
            }
        }
}

}  // namespace moex
