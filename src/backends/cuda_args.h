// Bridges an ExpertsProblem to cuda/launch.h's plain ExpertsArgs (no TensorView crosses into cuda/).
#pragma once

#include "moex/backend.h"

namespace moex::backends {

enum class CudaAlgo { kEager, kBatched, kGrouped };

// Runs the problem on the CUDA device; raises Error(kUnsupported) in a build without CUDA.
void run_cuda(const ExpertsProblem& p, const TensorView& out, CudaAlgo algo, const RunOptions& options);

}  // namespace moex::backends
