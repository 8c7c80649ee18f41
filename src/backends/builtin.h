// The built-in backends' factories and the small base they share. Only registry.cpp calls the factories.
#pragma once

#include <memory>

#include "moex/backend.h"

namespace moex::backends {

std::shared_ptr<const Backend> make_eager();
std::shared_ptr<const Backend> make_batched_mm();
std::shared_ptr<const Backend> make_grouped_mm();
std::shared_ptr<const Backend> make_deepgemm();
std::shared_ptr<const Backend> make_deepgemm_megamoe();
std::shared_ptr<const Backend> make_sonicmoe();

// Validates problem and output, checks why_not(), then leaves the call to the subclass. T = 0 launches nothing.
void check_runnable(const Backend& backend, const ExpertsProblem& problem, const TensorView& out);

// Why CUDA cannot run here (no CUDA in this build, no device, wrong architecture); nullopt = it can.
std::optional<std::string> cuda_unavailable();

}  // namespace moex::backends
