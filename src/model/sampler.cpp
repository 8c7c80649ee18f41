// Sampling: temperature, top-k, top-p (smallest set of most likely tokens whose mass reaches top_p), softmax draw.
#include "src/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "moex/error.h"

namespace moex::model {

Sampler::Sampler(double temperature, int64_t top_k, double top_p, uint64_t seed)
    : temperature_(temperature), top_p_(top_p), top_k_(top_k), rng_(seed) {
    MOEX_REQUIRE(
        temperature > 0 && std::isfinite(temperature), ErrorCode::kInvalidArgument,
        "temperature must be a positive number for sampling (0 means greedy), got " + std::to_string(temperature));
    MOEX_REQUIRE(top_k >= 0, ErrorCode::kInvalidArgument, "top_k must be >= 0 (0 = off), got " + std::to_string(top_k));
    MOEX_REQUIRE(top_p > 0 && top_p <= 1, ErrorCode::kInvalidArgument,
                 "top_p must be in (0, 1] (1 = off), got " + std::to_string(top_p));
}

int32_t Sampler::sample(std::vector<float>& logits) {
    // Candidates sorted by logit, largest first (NaN dropped; lower id first on ties).
    std::vector<int32_t> order;
    order.reserve(logits.size());
    for (size_t i = 0; i < logits.size(); ++i)
        if (!std::isnan(logits[i]) && logits[i] != -INFINITY) order.push_back(int32_t(i));
    MOEX_REQUIRE(!order.empty(), ErrorCode::kInvalidArgument, "sampling: every logit is NaN or -inf");
    size_t keep = order.size();
    if (top_k_ > 0) keep = std::min(keep, size_t(top_k_));
    std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(keep), order.end(), [&](int32_t a, int32_t b) {
        return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    });
    order.resize(keep);
    // Softmax of logits / temperature over the kept candidates, in double, as exp((logit - max) / temperature):
    // dividing first overflowed for tiny temperatures (9.5 / 1e-310 = inf, inf - inf = NaN, and the draw picked the
    // least likely token). This way every positive temperature is defined: the maxima get exp(0) = 1 (an infinite
    // logit among them too), the rest underflow to 0 as the temperature goes to 0, so tiny ones are greedy with
    // ties drawn evenly.
    const double top = logits[size_t(order[0])];
    std::vector<double> p(order.size());
    for (size_t i = 0; i < order.size(); ++i) {
        const double l = logits[size_t(order[i])];
        p[i] = l == top ? 1.0 : std::exp((l - top) / temperature_);
    }
    double sum = std::accumulate(p.begin(), p.end(), 0.0);
    if (top_p_ < 1.0) {
        double mass = 0;
        size_t n = 0;
        while (n < p.size()) {
            mass += p[n] / sum;
            ++n;
            if (mass >= top_p_) break;
        }
        p.resize(n);
        sum = std::accumulate(p.begin(), p.end(), 0.0);
    }
    double u = std::uniform_real_distribution<double>(0.0, sum)(rng_);
    for (size_t i = 0; i < p.size(); ++i) {
        if (u < p[i]) return order[i];
        u -= p[i];
    }
    return order[p.size() - 1];
}

}  // namespace moex::model
