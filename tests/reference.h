// The one float64 reference of the experts call, against which every backend is tested.
// It reads each input through its strides in its own dtype and follows the contract of moex/experts.h literally:
// plain loops over experts and their (token, slot) pairs, no tiling, nothing shared with the backends.
#pragma once

#include <cstdint>
#include <vector>

#include "moex/experts.h"

namespace moex::test {

struct ReferenceOptions {
    // kBF16 / kF16: round the gated hidden activation h = gate(W_up x + b_up), one (I,) vector per (token, slot),
    // to that dtype before the down projection. The backends do this for 16-bit activations, as torch does (its
    // bf16 linear returns bf16), so a reference that rounds at the same place can use a tolerance a few output ulps
    // wide. Without it the bf16 reference differs from every correct backend by ~2^-9 of |y| per slot.
    // kF64 (the default) keeps h exact; kF32 rounds it to float32.
    DType round_hidden_to = DType::kF64;
    // When given: resized to (T, H) and filled with Σ over the token's slots of |w·(y + b_down)|, the magnitude
    // of the terms each output sums (what a backend's rounding of each weighted term scales with).
    std::vector<double>* term_magnitude = nullptr;
};

// Element `offset` (in elements, strides already applied) of a host tensor, converted exactly to double.
// Handles bf16, f16, f32, f64, i32 and i64.
double load_as_double(const TensorView& t, int64_t offset);

// out: (T, H) row-major, overwritten. Needs every tensor of `p` in host memory; shapes are assumed valid
// (call p.validate() first where that matters), strides may be anything. Slots whose id lies outside [0, E)
// contribute exactly 0 and their weight is never read, so a NaN weight there cannot leak.
void reference_experts(const ExpertsProblem& p, double* out, const ReferenceOptions& options = {});

// Rounds x to the nearest value of `dtype` (bf16, f16 or f32; f64 returns x), round-to-nearest-even via float32.
double round_to(double x, DType dtype);

}  // namespace moex::test
