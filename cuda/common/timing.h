// CUDA-event timing for the benchmarks (bench/, tools/ep): plain C++, implemented in cuda/common/timing.cu.
#pragma once

namespace moex::cuda {

// Median over `reps` calls of `fn` on `stream` after `warmup` calls, in microseconds (CUDA events). With graph=true
// the calls are captured once into a CUDA graph and the replays are timed.
double time_us(void (*fn)(void* ctx, void* stream), void* ctx, void* stream, int warmup, int reps, bool graph);

}  // namespace moex::cuda
