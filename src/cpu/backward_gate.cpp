// The gate and its derivative per routed row in f32 with libm, for the backward (which recomputes h instead of
// storing it): act(g)·u, the gpt_oss clamped SwiGLU and ungated act(u), for every column layout of gate_up.
#include <cmath>

#include "src/cpu/backward.h"

namespace moex::cpu {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752f;    // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1/sqrt(2 pi)
constexpr float kTanhC = 0.79788456080286536f;       // sqrt(2/pi)

// act(x) and act'(x).
void activate(Activation a, float x, float& value, float& slope) {
    switch (a) {
        case Activation::kSilu: {
            const float s = 1.0f / (1.0f + std::exp(-x));
            value = x * s, slope = s * (1.0f + x * (1.0f - s));
            return;
        }
        case Activation::kGelu: {
            const float cdf = 0.5f * (1.0f + std::erf(x * kSqrtHalf));
            value = x * cdf, slope = cdf + x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
            return;
        }
        case Activation::kGeluTanh: {
            const float t = std::tanh(kTanhC * (x + 0.044715f * x * x * x));
            value = 0.5f * x * (1.0f + t);
            slope = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kTanhC * (1.0f + 3.0f * 0.044715f * x * x);
            return;
        }
        case Activation::kRelu:
            value = x < 0.0f ? 0.0f : x;  // NaN stays NaN, as in the forward
            slope = x > 0.0f ? 1.0f : 0.0f;
            return;
    }
}

// h = gate(g, u) and its partial derivatives (dg, du); ungated experts read u only.
void gate_pair(const CpuProblem& cp, float g, float u, float& h, float& dg, float& du) {
    if (cp.layout == GateLayout::kUngated) {
        activate(cp.act, u, h, du);
        dg = 0.0f;
        return;
    }
    if (cp.gate == GateKind::kGptOss) {  // g' = min(g, l), u' = clamp(u, -l, l), h = (u' + 1) g' sigmoid(alpha g')
        const float l = cp.limit, gc = l < g ? l : g, uc = u < -l ? -l : (l < u ? l : u);
        const float s = 1.0f / (1.0f + std::exp(-cp.alpha * gc));
        h = (uc + 1.0f) * (gc * s);
        dg = g <= l ? (uc + 1.0f) * s * (1.0f + cp.alpha * gc * (1.0f - s)) : 0.0f;
        du = -l <= u && u <= l ? gc * s : 0.0f;
        return;
    }
    float a, slope;
    activate(cp.act, g, a, slope);
    h = a * u, dg = slope * u, du = a;
}

// Column of the gate (first) and the up value (second) of pair i.
inline void columns(const CpuProblem& cp, int64_t i, int64_t& cg, int64_t& cu) {
    switch (cp.layout) {
        case GateLayout::kConcatenated: cg = i, cu = cp.I + i; return;
        case GateLayout::kInterleaved: cg = 2 * i, cu = 2 * i + 1; return;
        case GateLayout::kUngated: cg = cu = i; return;
    }
}

}  // namespace

void gate_values(const CpuProblem& cp, const float* a, float* h) {
    for (int64_t i = 0; i < cp.I; ++i) {
        int64_t cg = 0, cu = 0;
        columns(cp, i, cg, cu);
        float v, dg, du;
        gate_pair(cp, a[cg], a[cu], v, dg, du);
        h[i] = round_to(v, cp.dtype);
    }
}

void gate_grads(const CpuProblem& cp, const float* a, const float* dh, float* da) {
    for (int64_t i = 0; i < cp.I; ++i) {
        int64_t cg = 0, cu = 0;
        columns(cp, i, cg, cu);
        float v, dg, du;
        gate_pair(cp, a[cg], a[cu], v, dg, du);
        if (cp.layout == GateLayout::kUngated) {
            da[cu] = dh[i] * du;
        } else {
            da[cg] = dh[i] * dg, da[cu] = dh[i] * du;
        }
    }
}

}  // namespace moex::cpu
