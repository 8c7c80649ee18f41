// The bridge from an ExpertsProblem to cuda/launch.h (no TensorView crosses into cuda/): one ExpertsArgs filled from
// the problem, the gate parameters filled once, and the CUDA availability probe. Builds without CUDA refuse clearly.
#pragma once

#include <optional>
#include <string>

#include "cuda/launch.h"
#include "moex/backend.h"

namespace moex::backends {

// Runs the problem with a CUDA experts algorithm on the device; raises Error(kUnsupported) in a build without CUDA.
void run_cuda(const ExpertsProblem& p, const TensorView& out, cuda::Algo algo, const RunOptions& options);

// The shared CUDA backward of batched_mm and grouped_mm (moex/backward.h) on `stream`; the caller validated the
// call (validate_backward). Raises Error(kUnsupported) without CUDA in the build or a usable device.
// saved: what the forward kept (validated by the caller), or nullptr.
void run_cuda_backward(const ExpertsProblem& p, const TensorView& grad_out, const ExpertsGrads& grads, void* stream,
                       const ExpertsSaved* saved);

// Why CUDA algorithm `algo` cannot keep ExpertsSaved for this problem (nullopt: it can, and the backward reads it).
std::optional<std::string> cuda_save_refusal(const ExpertsProblem& p, cuda::Algo algo);

// Why the CUDA pipelines cannot run this quantized problem (block sizes that are not powers of two, or under 32
// along K); nullopt = they can. Pure host logic, in every build.
std::optional<std::string> cuda_quant_refusal(const ExpertsProblem& p);
// What the deepgemm backend refuses beyond its dtype and device (DeepGEMM's own refusals: static activation scales,
// per-tensor or non-128 x 128 FP8 blocks; weight-only FP8); nullopt = it runs it. Pure host logic, in every build.
std::optional<std::string> deepgemm_refusal(const ExpertsProblem& p);

// Why CUDA cannot run here (no CUDA in this build, no device, wrong architecture); nullopt = it can.
std::optional<std::string> cuda_unavailable();

}  // namespace moex::backends
