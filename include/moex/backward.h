// The experts call's backward: given the forward's inputs (an ExpertsProblem) and grad_out (T, H), the gradients of
// hidden_states, the routing weights, both projections and their biases. No (S, H) expert output is ever kept: h is
// recomputed, and so is the gate/up projection unless the forward kept it (ExpertsSaved, S = T·k rows of N values).
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

// What a training forward may keep so that its backward skips the gate/up projection: A = x·Wuᵀ + bu of every routed
// row, rounded to the activation dtype (transformers' autograd keeps the same bf16 gate_up output), in the forward's
// row order, and each slot's row: what SonicMoE keeps besides x and the routing. Both views or neither, contiguous, on
// the problem's device. A backend writes them in run() (RunOptions::saved, where save_refusal says it can) and reads
// them in backward(); the backward's results are the same bits either way.
struct ExpertsSaved {
    TensorView gate_up;   // (T·k, N) dtype of hidden_states; N = 2I gated
    TensorView slot_row;  // (T·k,) int32: the row of gate_up holding slot t·k + j; -1 for a sentinel id
};

// Errors name the view and what is wrong (shape, dtype, device, contiguity).
void validate_saved(const ExpertsProblem& problem, const ExpertsSaved& saved);

// Validates the problem, grad_out and the gradient views (errors name the tensor and what is wrong); quantized
// weights are refused by format name, as FP8 / FP4 codes have no gradient.
void validate_backward(const ExpertsProblem& problem, const TensorView& grad_out, const ExpertsGrads& grads);

// The backward of the contract's math in f32 arithmetic (h = gate(...) rounded to the activation dtype as the
// forward does; each gradient rounded once to its dtype), shared by the eager, batched_mm and grouped_mm backends
// on the CPU and by batched_mm and grouped_mm on CUDA. Deterministic: on the CPU the same bits for any thread count
// (num_threads, 0 = all), on CUDA the same bits on every run (no float atomics; ordered on cuda_stream, nullptr = the
// default stream, without synchronising the host; CUDA tensors on the current device).
// saved: what the forward kept (nullptr: recompute; the CPU backward always recomputes).
void experts_backward(const ExpertsProblem& problem, const TensorView& grad_out, const ExpertsGrads& grads,
                      int num_threads = 0, void* cuda_stream = nullptr, const ExpertsSaved* saved = nullptr);

}  // namespace moex
