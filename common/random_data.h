// Random data for example problem files and the benchmark: float tensors (normal or uniform, any float dtype) and
// uniform top-k routing (k distinct experts per token, softmax-normalised weights). Deterministic for a given seed
// whatever the thread count: each 1 Mi-element chunk has its own generator.
#pragma once

#include <cstdint>

#include "moex/tensor.h"

namespace moex::common {

enum class Distribution { kNormal, kUniform };  // kUniform: U(-a, a) with the same standard deviation (a = std·√3)

// Fills a contiguous host tensor of dtype bf16, f16, f32 or f64 with values of mean 0 and standard deviation `std`.
void fill_random(const TensorView& t, double std, uint64_t seed, Distribution dist, int num_threads = 0);

// Uniform routing: for each token, k distinct experts in [0, E) (uniform over subsets), and weights that are the
// softmax of N(0, 1) logits over those k (so each row sums to 1).
//   index: (T, k) i32 | i64     weights: (T, k) f32 | bf16 | f16
void random_routing(const TensorView& index, const TensorView& weights, int64_t E, uint64_t seed);

// Distinct expert ids in [0, E) that appear in a (T, k) index tensor.
int64_t count_touched_experts(const TensorView& index, int64_t E);

// A 64-bit mix of several values, for deriving independent seeds (splitmix64 finaliser).
uint64_t mix_seed(uint64_t a, uint64_t b);

}  // namespace moex::common
