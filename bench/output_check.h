// The light correctness checks of `moex bench`: NaN or Inf left in an output (poisoned before the run), and a
// cross-check of one backend's output against another's on the same problem.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moex/tensor.h"

namespace moex::bench {

// A contiguous host tensor of bf16, f16 or f32 as floats.
std::vector<float> to_floats(const TensorView& host);
bool all_finite(const std::vector<float>& v);

struct CrossCheck {
    bool ok = true;
    double max_rel = 0;  // max |got - ref| / rms(ref)
    int64_t bad = 0;     // elements beyond the bound
    std::string text;    // max_rel ("4.1e-03"), or "MISMATCH vs <ref_name>: ..."
};

// Element-wise bound |got - ref| <= 1e-2·rms(ref) + rtol·|ref|, rtol = two output roundings of `dtype` (bf16: 2^-7):
// two backends that accumulate in float32 in different orders may each round the same value to a neighbouring
// 16-bit number, which near 5·rms is 3e-2·rms in bf16; anything larger is a wrong row, expert or weight.
// e4m3_activations: both quantize each GEMM input to e4m3 (FP8 weights, dynamic activations), where one value of h
// rounded to the other side of an e4m3 midpoint moves its token's outputs by up to one e4m3 step: up to 15% of the
// values may then pass the bound if all stay within 0.25·rms (the budget of tests/test_quant.cpp's CUDA checks).
CrossCheck cross_check(const std::vector<float>& ref, const std::vector<float>& got, DType dtype,
                       const std::string& ref_name, bool e4m3_activations = false);

}  // namespace moex::bench
