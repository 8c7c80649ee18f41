// The float64 reference of the experts backward, shared by tests/test_backward.cpp (CPU) and
// tests/test_backward_cuda.cpp: an analytic backward of the float64 forward (itself checked against the shared
// forward reference and finite differences in test_backward.cpp), gradient data and the comparison with tolerances.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "moex/experts.h"
#include "moex/tensor.h"
#include "tests/test_support.h"

namespace moex::test {

// The problem as dense logical arrays in float64.
struct Dense {
    int64_t T, H, I, E, k, N;
    const ExpertsProblem* p;
    std::vector<double> x, wu, wd, bu, bd, w;  // (T, H), (E, N, H), (E, H, I), (E, N), (E, H), (T, k)
    std::vector<int64_t> ids;                  // (T, k)
};

Dense dense_of(const ExpertsProblem& p);

struct Grads64 {
    std::vector<double> x, w, wu, wd, bu, bd;  // logical layouts as in Dense
};

// loss = Σ dout ⊙ out; returns the loss and, when g is given, its gradients. round: h rounded as the backends do.
// mag, when given: for dx, d gate_up_proj and d down_proj, the sum of the magnitudes of the products each gradient
// element sums (|dA|·|W_up| for dx, |dA|·|x| for d gate_up_proj, |w dO|·|h| for d down_proj). A path that rounds
// dA or w·h to 16 bits before those sums moves an element by at most 2^-8 (bf16) of it.
// round_a: the pre-activation A = x·Wuᵀ + bu rounded to `round` too, as the tensor-core backward keeps it (and as
// transformers' autograd keeps its bf16 gate_up output): its gradients are those of the math on that A.
double forward_backward(const Dense& d, const std::vector<double>& dout, DType round, Grads64* g,
                        Grads64* mag = nullptr, bool round_a = false);

// The logical weight gradients ((E, N, H) up, (E, H, I) down) in the problem's storage layout (transposed or not).
std::vector<double> up_storage(const Dense& d, const std::vector<double>& v);
std::vector<double> down_storage(const Dense& d, const std::vector<double>& v);

// grad_out (T, H) in the problem's dtype, uniform in [-1, 1), never exactly 0.
Tensor grad_out_for(const ExpertsProblem& p, uint64_t seed);
std::vector<double> as_doubles(const TensorView& t);

// |got - ref| <= atol * rms(ref) + rtol * |ref| (+ slack[i] when given) element-wise (per-dtype atol, rtol), NaN
// never passes. slack: the rounding a path adds on purpose (a 16-bit intermediate: test_backward_cuda.cpp).
::testing::AssertionResult close(const char* what, const TensorView& got, const std::vector<double>& ref, DType dt,
                                 const std::vector<double>* slack = nullptr);

// Every layout (stacked, interleaved, ungated) x transposed x bias x activation (silu, gelu, gelu tanh, relu,
// gpt_oss), routing weights in f32 and in the dtype, int32 and int64 ids.
std::vector<Variant> all_layouts(DType dt);

// Expert `unhit` never reached (its slots become sentinels), plus sentinels E and E + 1000 with NaN weights.
void add_sentinels(HostProblem& hp, int64_t T, int64_t k, int64_t E, int64_t unhit);

}  // namespace moex::test
