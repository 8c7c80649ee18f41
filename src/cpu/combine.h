// The ends of a pass: hidden states widened to f32 once per token (the GEMMs gather rows by pointer), and the
// combine out[t] = Σ_j w[t,j]·y[row(t,j)] in slot order j = 0..k-1 in f32, converted to the output dtype once.
#pragma once

#include <cstdint>

#include "src/cpu/parallel.h"
#include "src/cpu/problem.h"
#include "src/cpu/routing.h"

namespace moex::cpu {

// x[t0:t1] as (t1 - t0, H) f32: the input itself when it is f32, else a widened copy in buf.
const float* x_as_f32(const CpuProblem& cp, int64_t t0, int64_t t1, FloatBuffer& buf, int threads);

// Writes n f32 values at dst as dtype `dt` (bf16 | f16 | f32), round-to-nearest-even (f32_to_bf16 / f32_to_f16's bits;
// bf16 through the kernel table's vector conversion where it has one): the combine's rows, the backward's gradients.
void from_f32(const float* src, int64_t n, DType dt, void* dst);

// out[t0:t1] from y (rows, H); sentinel slots (slot_row < 0) are skipped, whatever their weight.
void combine(const CpuProblem& cp, const Routing& r, int64_t t0, int64_t t1, const float* y, void* out, int threads);

}  // namespace moex::cpu
