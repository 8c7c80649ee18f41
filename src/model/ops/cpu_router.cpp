// The softmax top-k router and the host-returning ops (logits_to_host, argmax) on the CPU.
// Top-k ties: torch.topk on the CPU does not put the lower index first. It sorts (value, index) pairs with
// std::partial_sort when k * 64 <= E, else std::nth_element then std::sort of the first k - 1, comparing values only
// (NaN largest). The same calls here pick the same experts in the same order as transformers on the CPU, ties
// included: checked against torch 2.15 on 1600 rows of bf16-rounded logits, a third of them full of ties.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "moex/error.h"
#include "src/model/ops/cpu_ops.h"

namespace moex::model::cpu_ops {
namespace {

using Entry = std::pair<float, int64_t>;  // (probability, expert), as torch's topk queue

// torch's topk of one row, largest first (SortingKernel / TopKImpl: topk_impl_loop with largest = sorted = true).
void torch_topk(std::vector<Entry>& queue, int64_t k) {
    const auto greater = [](const Entry& x, const Entry& y) {
        return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
    };
    if (k * 64 <= int64_t(queue.size())) {
        std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), greater);
    } else {
        std::nth_element(queue.begin(), queue.begin() + (k - 1), queue.end(), greater);
        std::sort(queue.begin(), queue.begin() + (k - 1), greater);
    }
}

void require_index_matrix(const TensorView& t, const char* name) {
    MOEX_REQUIRE(t.defined() && t.data != nullptr && t.device == Device::kCPU && t.ndim == 2,
                 ErrorCode::kInvalidArgument, std::string("ops.router_topk: ") + name + " must be a 2-D CPU tensor");
    MOEX_REQUIRE(
        t.dtype == DType::kI32 || t.dtype == DType::kI64, ErrorCode::kInvalidArgument,
        std::string("ops.router_topk: ") + name + " must be int32 or int64, got " + std::string(dtype_name(t.dtype)));
    MOEX_REQUIRE(t.strides[1] == 1 && (t.shape[0] <= 1 || t.strides[0] >= t.shape[1]), ErrorCode::kInvalidArgument,
                 std::string("ops.router_topk: ") + name + " must have unit column stride " + t.shape_string());
}

// A row of logits as (n) or (1, n) with unit stride; returns n.
int64_t require_logits_row(const TensorView& t, const char* op) {
    MOEX_REQUIRE(t.defined() && t.data != nullptr && t.device == Device::kCPU, ErrorCode::kInvalidArgument,
                 std::string("ops.") + op + ": logits_row must be a CPU tensor");
    MOEX_REQUIRE(is_float_activation(t.dtype), ErrorCode::kInvalidArgument,
                 std::string("ops.") + op + ": logits_row must be float32, bfloat16 or float16");
    const bool row = (t.ndim == 1 || (t.ndim == 2 && t.shape[0] == 1)) && t.strides[t.ndim - 1] == 1;
    MOEX_REQUIRE(row, ErrorCode::kInvalidArgument,
                 std::string("ops.") + op + ": logits_row must be one contiguous row, got " + t.shape_string());
    return t.shape[t.ndim - 1];
}

}  // namespace

// Qwen*/OLMoE/Mixtral TopKRouter: p = softmax(logits.float()); top-k of p; / sum(top) when normalize; cast to the
// weights' dtype. The softmax is torch's: max, exp(x - max), then a multiply by 1 / sum.
void router_topk(const TensorView& logits, int64_t k, bool normalize, const TensorView& ids, const TensorView& weights,
                 int threads) {
    require_matrix(logits, "router_topk", "logits");
    require_matrix(weights, "router_topk", "weights");
    require_index_matrix(ids, "ids");
    const int64_t T = logits.shape[0], E = logits.shape[1];
    MOEX_REQUIRE(k >= 1 && k <= E, ErrorCode::kInvalidArgument,
                 "ops.router_topk: k = " + std::to_string(k) + " must be in [1, " + std::to_string(E) + "]");
    MOEX_REQUIRE(ids.shape[0] == T && ids.shape[1] == k && weights.shape[0] == T && weights.shape[1] == k,
                 ErrorCode::kInvalidArgument,
                 "ops.router_topk: ids " + ids.shape_string() + " and weights " + weights.shape_string() +
                     " must be (" + std::to_string(T) + ", " + std::to_string(k) + ")");
    for_row_blocks(T, E * 8, threads, [&](int64_t t0, int64_t t1) {
        float* p = scratch(Slot::kTaskA, E);
        float* top = scratch(Slot::kTaskB, k);
        std::vector<Entry> queue(static_cast<size_t>(E));
        for (int64_t t = t0; t < t1; ++t) {
            load_row(logits, t, 0, E, p);
            float mx = p[0];
            for (int64_t e = 1; e < E; ++e) mx = p[e] > mx || std::isnan(p[e]) ? p[e] : mx;
            double sum = 0.0;
            for (int64_t e = 0; e < E; ++e) sum += double(p[e] = std::exp(p[e] - mx));
            const float inv = 1.0f / float(sum);
            for (int64_t e = 0; e < E; ++e) queue[size_t(e)] = {p[e] * inv, e};
            torch_topk(queue, k);
            float s = 0.0f;
            for (int64_t j = 0; j < k; ++j) s += (top[j] = queue[size_t(j)].first);
            for (int64_t j = 0; j < k; ++j) {
                if (normalize) top[j] /= s;
                char* id = element_ptr(ids, t, j);
                if (ids.dtype == DType::kI32)
                    *reinterpret_cast<int32_t*>(id) = int32_t(queue[size_t(j)].second);
                else
                    *reinterpret_cast<int64_t*>(id) = queue[size_t(j)].second;
            }
            store_row(top, weights, t, 0, k);
        }
    });
}

void logits_to_host(const TensorView& logits_row, float* host) {
    const int64_t n = require_logits_row(logits_row, "logits_to_host");
    MOEX_REQUIRE(n == 0 || host != nullptr, ErrorCode::kInvalidArgument, "ops.logits_to_host: host is null");
    load_row(logits_row, 0, 0, n, host);
}

// Lowest index among the largest values; NaN never wins (index 0 when every value is NaN).
int64_t argmax(const TensorView& logits_row) {
    const int64_t n = require_logits_row(logits_row, "argmax");
    MOEX_REQUIRE(n > 0, ErrorCode::kInvalidArgument, "ops.argmax: the row is empty");
    float* v = scratch(Slot::kCallerA, n);
    load_row(logits_row, 0, 0, n, v);
    int64_t best = -1;
    for (int64_t i = 0; i < n; ++i)
        if (!std::isnan(v[i]) && (best < 0 || v[i] > v[best])) best = i;
    return best < 0 ? 0 : best;
}

}  // namespace moex::model::cpu_ops
