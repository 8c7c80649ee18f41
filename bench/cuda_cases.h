// The CUDA runner of `moex bench --device cuda`: CUDA-event timing through cuda::time_us (median of repetitions),
// eight rotating routing sets, optional CUDA-graph replay, a poisoned output and a cross-check between backends.
#pragma once

#include <memory>

#include "bench/cases.h"

namespace moex::bench {

// Routing sets per case, each a fresh uniform top-k (as the HF baselines: 8 rotating sets).
inline constexpr int kRoutingSets = 8;

// Without --graph every timed call takes the next routing set (and weight set), so consecutive calls touch different
// experts and the 60 MB L2 cannot serve them. With --graph all eight sets are captured back to back into one graph,
// as one decode step captures every layer; a replay is timed and divided by eight. The first backend timed at each T
// is the reference the others are cross-checked against (output of routing set 0). Throws moex::Error when this
// build has no CUDA or the weights cannot be allocated.
std::unique_ptr<CaseRunner> make_cuda_runner(const ShapePlan& plan, const BenchConfig& config);

}  // namespace moex::bench
