// The gate epilogue over one up task's tile (bias, de-interleave, then the kernel table's gate_row), and the
// portable element-wise gate with libm activations in float32.
#include "src/cpu/gate.h"

#include <cmath>

#include "src/cpu/kernels.h"
#include "src/cpu/parallel.h"

namespace moex::cpu {
namespace {

template <Activation A>
inline float act(float x) {
    if constexpr (A == Activation::kSilu) return x / (1.0f + std::exp(-x));
    if constexpr (A == Activation::kGelu) return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    if constexpr (A == Activation::kGeluTanh) {
        const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);  // sqrt(2/pi)
        return 0.5f * x * (1.0f + std::tanh(inner));
    }
    if constexpr (A == Activation::kRelu) return x < 0.0f ? 0.0f : x;  // NaN stays NaN
    return x;
}

// gpt_oss: g = min(gate, l), u = clamp(up, -l, l), out = (u + 1) * g * sigmoid(alpha g). NaN propagates.
inline float gpt_oss(float g, float u, float alpha, float limit) {
    g = limit < g ? limit : g;
    u = u < -limit ? -limit : (limit < u ? limit : u);
    return (u + 1.0f) * (g / (1.0f + std::exp(-alpha * g)));
}

template <Activation A>
void gate_row_act(const GateOp& op, const float* g, const float* u, int64_t n, float* h) {
    for (int64_t i = 0; i < n; ++i) {
        const float v = !op.gated                      ? act<A>(u[i])
                        : op.kind == GateKind::kGptOss ? gpt_oss(g[i], u[i], op.alpha, op.limit)
                                                       : act<A>(g[i]) * u[i];
        h[i] = round_to(v, op.round);
    }
}

}  // namespace

void gate_row_scalar(const GateOp& op, const float* g, const float* u, int64_t n, float* h) {
    switch (op.act) {
        case Activation::kSilu: return gate_row_act<Activation::kSilu>(op, g, u, n, h);
        case Activation::kGelu: return gate_row_act<Activation::kGelu>(op, g, u, n, h);
        case Activation::kGeluTanh: return gate_row_act<Activation::kGeluTanh>(op, g, u, n, h);
        case Activation::kRelu: return gate_row_act<Activation::kRelu>(op, g, u, n, h);
    }
}

void apply_gate(const CpuProblem& cp, int64_t e, float* tile, int64_t m, int64_t i0, int64_t ni, float* h,
                int64_t ldh) {
    const int64_t width = up_task_width(cp, ni);
    if (cp.up_bias) {  // the bias of the task's weight rows, widened to f32 in the tile's column order
        float* b = thread_scratch(2, width);
        const int64_t es = dtype_size(cp.dtype);
        const char* row = static_cast<const char*>(cp.up_bias) + e * cp.up_width * es;
        if (cp.layout == GateLayout::kConcatenated) {
            to_f32(row + i0 * es, cp.dtype, ni, b);
            to_f32(row + (cp.I + i0) * es, cp.dtype, ni, b + ni);
        } else {
            to_f32(row + (cp.layout == GateLayout::kInterleaved ? 2 * i0 : i0) * es, cp.dtype, width, b);
        }
        for (int64_t r = 0; r < m; ++r)
            for (int64_t c = 0; c < width; ++c) tile[r * width + c] += b[c];
    }
    const GateOp op = cp.gate_op();
    const KernelTable& kt = kernels();
    float* split = cp.layout == GateLayout::kInterleaved ? thread_scratch(3, 2 * ni) : nullptr;
    for (int64_t r = 0; r < m; ++r) {
        const float* row = tile + r * width;
        const float *g = row, *u = cp.layout == GateLayout::kUngated ? row : row + ni;
        if (split) {  // (g0, u0, g1, u1, ...) -> (g0, g1, ... | u0, u1, ...)
            for (int64_t i = 0; i < ni; ++i) split[i] = row[2 * i], split[ni + i] = row[2 * i + 1];
            g = split, u = split + ni;
        }
        kt.gate_row(op, g, u, ni, h + r * ldh);
    }
}

}  // namespace moex::cpu
