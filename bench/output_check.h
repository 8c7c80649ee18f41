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
    std::string text;    // max_rel ("4.1e-03"), "3.1e-02 (2 rounding outliers)", or "MISMATCH vs <ref_name>: ..."
};

// Element-wise bound |got - ref| <= 1e-2·rms(ref) + two output steps at |ref| (the 16-bit format's ulp; f32:
// 1e-4·|ref|). Two backends that accumulate in float32 in different orders round the same value to neighbouring 16-bit
// numbers (one step); a backend that rounds each of its k weighted expert rows to the dtype before the f32 sum
// (grouped_mm in bf16, as transformers' index_add of bf16 rows does) moves the sum by up to k half-steps of its terms,
// which now and then carries it across a second rounding boundary (two steps), and where large terms cancel, past
// 1e-2·rms. bench/cross_check_sim.py (that rounding, 8 Gaussian terms) puts 1.1e-7 of the values beyond the bound, the
// largest 1.4e-2·rms; the H100 runs saw 1-7 in 8-117 M at T >= 4096 past the earlier one-step bound, at most 3.9e-2·rms
// (RESULTS AH1, the largest |Δ| of all values). So a rounding tail of at most kRoundingTail·n values (none below 10^6
// values), each within 5e-2·rms, passes; anything larger is a wrong row, expert or weight, which moves a whole row (H
// values) by about its rms. e4m3_activations: both quantize each GEMM input to e4m3 (FP8 weights, dynamic activations),
// where one value of h rounded to the other side of an e4m3 midpoint moves its token's outputs by up to one e4m3 step:
// up to 15% of the values may then pass the bound if all stay within 0.25·rms (the budget of tests/test_quant.cpp's
// CUDA checks).
inline constexpr double kRoundingTail = 1e-6;
CrossCheck cross_check(const std::vector<float>& ref, const std::vector<float>& got, DType dtype,
                       const std::string& ref_name, bool e4m3_activations = false);

}  // namespace moex::bench
