// linear on the CPU: out (T, N) = x (T, K) · wᵀ + bias through moex's dense GEMM (src/cpu/gemm.h), f32 accumulation.
// At T = 1 dense_gemm takes the streaming path (weights read once, widened in registers, 64-row tasks over the pool),
// which is what bounds a decode step's lm_head and projections: their weights' bytes at memory bandwidth.
#include <string>

#include "moex/error.h"
#include "src/cpu/gemm.h"
#include "src/cpu/problem.h"
#include "src/model/ops/cpu_ops.h"

namespace moex::model::cpu_ops {

void linear(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out, int threads) {
    require_matrix(x, "linear", "x");
    require_matrix(w, "linear", "w");
    require_matrix(out, "linear", "out");
    require_same_rows(x, out, "linear", "x", "out");
    const int64_t T = x.shape[0], K = x.shape[1], N = w.shape[0];
    MOEX_REQUIRE(w.shape[1] == K && out.shape[1] == N, ErrorCode::kInvalidArgument,
                 "ops.linear: x " + x.shape_string() + ", w " + w.shape_string() + " and out " + out.shape_string() +
                     " do not make (T, K) · (N, K)ᵀ = (T, N)");
    MOEX_REQUIRE(N <= 1 || w.strides[0] == K, ErrorCode::kInvalidArgument,
                 "ops.linear: w " + w.shape_string() + " must be contiguous");
    const bool has_bias = bias.defined();
    if (has_bias)
        MOEX_REQUIRE(require_vector(bias, "linear", "bias") == N, ErrorCode::kInvalidArgument,
                     "ops.linear: bias " + bias.shape_string() + " must have " + std::to_string(N) + " elements");
    if (T == 0 || N == 0) return;
    const int64_t a_elems = checked_mul(T, K, "ops.linear: x elements");
    const int64_t c_elems = checked_mul(T, N, "ops.linear: out elements");

    // A and C as dense f32 (T, K) and (T, N): x and out themselves when they already are.
    const bool x_direct = x.dtype == DType::kF32 && (T == 1 || x.strides[0] == K);
    const bool out_direct = out.dtype == DType::kF32 && (T == 1 || out.strides[0] == N);
    const float* A = x.ptr<float>();
    if (!x_direct) {
        float* a = scratch(Slot::kCallerA, a_elems);
        for_row_blocks(T, K, threads, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) load_row(x, t, 0, K, a + t * K);
        });
        A = a;
    }
    float* C = out_direct ? out.ptr<float>() : scratch(Slot::kCallerC, c_elems);
    MOEX_REQUIRE(!(out_direct && x_direct && A == C), ErrorCode::kInvalidArgument, "ops.linear: out must not alias x");
    cpu::dense_gemm(A, w.data, w.dtype, C, T, N, K, threads);

    if (out_direct && !has_bias) return;
    float* b = nullptr;
    if (has_bias) {
        b = scratch(Slot::kCallerA, N);  // A is no longer needed
        cpu::to_f32(bias.data, bias.dtype, N, b);
    }
    for_row_blocks(T, N, threads, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            float* row = C + t * N;
            if (b)
                for (int64_t n = 0; n < N; ++n) row[n] += b[n];
            if (!out_direct) store_row(row, out, t, 0, N);
        }
    });
}

}  // namespace moex::model::cpu_ops
