// The three experts pipelines behind run_experts (cuda/launch.h), and the small helper they share.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/launch.h"

namespace moex::cuda {

void run_eager(const ExpertsArgs& a, cudaStream_t stream);    // may synchronise the host (reads counts back)
void run_batched(const ExpertsArgs& a, cudaStream_t stream);  // decode: 1 routing + 2 projection launches
void run_grouped(const ExpertsArgs& a, cudaStream_t stream);  // prefill: routing, gather, 2 grouped GEMMs, combine

inline int64_t up_width(const ExpertsArgs& a) { return a.has_gate ? 2 * a.I : a.I; }

}  // namespace moex::cuda
