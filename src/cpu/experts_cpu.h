// CPU implementations of the three portable experts algorithms. Inputs are validated by the caller.
// All are multithreaded and bitwise deterministic for any thread count.
#pragma once

#include "moex/experts.h"

namespace moex::cpu {

void run_eager(const ExpertsProblem& p, const TensorView& out, int num_threads);    // loop over hit experts
void run_batched(const ExpertsProblem& p, const TensorView& out, int num_threads);  // per (token, slot) products
void run_grouped(const ExpertsProblem& p, const TensorView& out, int num_threads);  // sort, grouped GEMM, combine

}  // namespace moex::cpu
