// The experts backward on CUDA (batched_mm and grouped_mm share it): the plain argument struct and its launcher, as
// cuda/launch.h holds the forward's. Plain C++ (no CUDA headers). No host sync: every size is a host bound.
#pragma once

#include "cuda/launch.h"

namespace moex::cuda {

// One backward call: the forward's inputs (fwd.out unused) and where each gradient goes (nullptr: not computed).
// All tensors contiguous and on the current device; every gradient has its input's shape, layout and dtype.
struct ExpertsBackwardArgs {
    ExpertsArgs fwd;
    const void* grad_out;     // (T, H)                      fwd.dtype
    void* grad_hidden;        // (T, H)                      fwd.dtype
    void* grad_weights;       // (T, k)                      float32 (fwd.weights_f32) | fwd.dtype; sentinels get 0
    void* grad_gate_up;       // (E, N, H) | transposed (E, H, N)   fwd.dtype
    void* grad_down;          // (E, H, I) | transposed (E, I, H)   fwd.dtype
    void* grad_gate_up_bias;  // (E, N)                      fwd.dtype
    void* grad_down_bias;     // (E, H)                      fwd.dtype
};

// The backward of the contract's math in f32 (h recomputed from x as the CPU backward does, rounded to the dtype;
// each gradient rounded once), deterministic (no float atomics), on `stream`. Weights in the activation dtype only.
// fwd.saved_*: what the forward kept (the tensor-core backward reads them; the SIMT one recomputes).
void run_experts_backward(const ExpertsBackwardArgs& args, void* stream);

// Why a forward of this call should not keep its pre-activation (nullptr: grouped_mm's pipeline keeps it and the
// tensor-core backward reads it): shapes, dtypes, flags and the device only.
const char* backward_save_why_not(const ExpertsArgs& fwd);

}  // namespace moex::cuda
