// Token choice from a row of logits, in transformers' warper order: temperature, top-k, top-p, then a draw from
// the softmax with a seeded generator (greedy = argmax, done on the device by the caller).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace moex::model {

class Sampler {
   public:
    Sampler(double temperature, int64_t top_k, double top_p, uint64_t seed);
    // logits: one f32 row (modified in place). NaN logits never win; an all -inf/NaN row is an error.
    int32_t sample(std::vector<float>& logits);

   private:
    double temperature_, top_p_;
    int64_t top_k_;
    std::mt19937_64 rng_;
};

}  // namespace moex::model
