// The CPU backward of the experts call (moex/backward.h), shared by eager, batched_mm and grouped_mm, and the gate's
// derivative it needs. Inputs are validated by the caller (validate_backward).
#pragma once

#include "moex/backward.h"
#include "src/cpu/problem.h"

namespace moex::cpu {

// Experts as tasks (each recomputes gate/up and h for its rows, in row blocks of a fixed size, and reduces its weight
// and bias gradients in row order), then dx per token in slot order: the same bits for any thread count.
void run_backward(const ExpertsProblem& p, const TensorView& grad_out, const ExpertsGrads& grads, int num_threads);

// One routed row's gate, a (up_width,) in the weight rows' order (concatenated, interleaved or ungated):
// h (I,) = round(gate(a)) as the forward computes it, in f32 with libm.
void gate_values(const CpuProblem& cp, const float* a, float* h);
// da (up_width,) = dh · ∂gate/∂a, element-wise per (gate, up) pair; the rounding of h passes the gradient unchanged
// (as torch's does) and the gpt_oss clamps pass it where the input lies inside [-limit, limit] (torch's clamp).
void gate_grads(const CpuProblem& cp, const float* a, const float* dh, float* da);

}  // namespace moex::cpu
