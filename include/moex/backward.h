// The experts call's backward: given the forward's inputs (an ExpertsProblem) and grad_out (T, H), the gradients of
// hidden_states, the routing weights, both projections and their biases. Nothing from the forward is kept: gate/up
// and h are recomputed from X, the routing and the weights, so a training step holds no (S, H) expert outputs.
#pragma once

#include "moex/experts.h"

namespace moex {

// Where the gradients go. Each view is optional: an undefined one is not computed (a frozen weight, an x that needs
// no gradient). A defined one has its input's shape, dtype and device, is contiguous and is overwritten entirely
// (experts no token reaches get zeros).
struct ExpertsGrads {
    TensorView hidden_states;  // (T, H)    dtype of hidden_states
    TensorView top_k_weights;  // (T, k)    dtype of top_k_weights; sentinel slots get exactly 0
    TensorView gate_up_proj;   // the layout of gate_up_proj: (E, N, H), transposed (E, H, N)
    TensorView down_proj;      // (E, H, I), transposed (E, I, H)
    TensorView gate_up_bias;   // (E, N), only when the problem has one
    TensorView down_bias;      // (E, H), only when the problem has one
};

// Validates the problem, grad_out and the gradient views (errors name the tensor and what is wrong); quantized
// weights are refused by format name, as FP8 / FP4 codes have no gradient.
void validate_backward(const ExpertsProblem& problem, const TensorView& grad_out, const ExpertsGrads& grads);

// The backward of the contract's math in f32 arithmetic (h = gate(...) rounded to the activation dtype as the
// forward does; each gradient rounded once to its dtype), shared by the eager, batched_mm and grouped_mm backends
// on the CPU and by batched_mm and grouped_mm on CUDA. Deterministic: on the CPU the same bits for any thread count
// (num_threads, 0 = all), on CUDA the same bits on every run (no float atomics; ordered on cuda_stream, nullptr = the
// default stream, without synchronising the host; CUDA tensors on the current device).
void experts_backward(const ExpertsProblem& problem, const TensorView& grad_out, const ExpertsGrads& grads,
                      int num_threads = 0, void* cuda_stream = nullptr);

}  // namespace moex
