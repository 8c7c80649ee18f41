// The three experts pipelines behind run_experts (cuda/launch.h), and small helpers they share.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/launch.h"

namespace moex::cuda {

void run_eager(const ExpertsArgs& a, cudaStream_t stream);    // may synchronise the host (reads counts back)
void run_batched(const ExpertsArgs& a, cudaStream_t stream);  // decode: 1 routing + 2 projection launches
void run_grouped(const ExpertsArgs& a, cudaStream_t stream);  // prefill: routing, gather, 2 grouped GEMMs, combine

inline int act_size(ActDType d) { return d == ActDType::kF32 ? 4 : 2; }
inline int64_t up_width(const ExpertsArgs& a) { return a.has_gate ? 2 * a.I : a.I; }
inline bool is_aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace moex::cuda
