// The float64 reference: out[t] = sum_j w[t,j] * (W_down_e . gate(W_up_e . x[t] + b_up_e) + b_down_e), e = ids[t,j].
// Weights are read on the fly through their strides, so the reference also accepts views that validate() refuses.
// Quantized weights are dequantized exactly in float64; quantized activations follow moex/quant.h's f32 recipe.
#include "tests/reference.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "moex/error.h"

namespace moex::test {
namespace {

// Offset of element (i0, i1[, i2]) of a view.
int64_t at(const TensorView& t, int64_t i0, int64_t i1) { return i0 * t.strides[0] + i1 * t.strides[1]; }
int64_t at(const TensorView& t, int64_t i0, int64_t i1, int64_t i2) {
    return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2];
}

double activate(Activation a, double v) {
    switch (a) {
        case Activation::kSilu: return v / (1.0 + std::exp(-v));
        case Activation::kGelu: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
        case Activation::kGeluTanh: {
            const double c = std::sqrt(2.0 / std::numbers::pi);
            return 0.5 * v * (1.0 + std::tanh(c * (v + 0.044715 * v * v * v)));
        }
        case Activation::kRelu: return v > 0.0 ? v : 0.0;
    }
    return v;
}

// gate(g, u) for a gated expert.
double gated(const ExpertsProblem& p, double g, double u) {
    if (p.gate == GateKind::kGptOss) {
        const double limit = p.swiglu_limit, alpha = p.swiglu_alpha;
        g = std::min(g, limit);
        u = std::clamp(u, -limit, limit);
        return (u + 1.0) * g / (1.0 + std::exp(-alpha * g));
    }
    return activate(p.activation, g) * u;
}

// A scale companion's element as double (f32, ue8m0 or uint8 bytes read as ue8m0, e4m3).
double scale_value(const TensorView& s, int64_t offset) {
    switch (s.dtype) {
        case DType::kF32: return static_cast<const float*>(s.data)[offset];
        case DType::kFP8E4M3: return fp8e4m3_to_f32(static_cast<const uint8_t*>(s.data)[offset]);
        default: return std::ldexp(1.0, int(static_cast<const uint8_t*>(s.data)[offset]) - 127);
    }
}

// Weight (e, n, k) of a quantized projection (E, N, K), dequantized exactly (moex/quant.h).
double quantized_weight(const ExpertsQuant& q, const TensorView& w, const ProjectionQuant& pq, int64_t e, int64_t n,
                        int64_t k) {
    const auto* b = static_cast<const uint8_t*>(w.data);
    double code;
    if (q.fp4()) {
        const uint8_t byte = b[at(w, e, n, k / 2)];
        code = fp4e2m1_to_f32((k & 1) ? byte >> 4 : byte & 15);
    } else {
        code = fp8e4m3_to_f32(b[at(w, e, n, k)]);
    }
    const TensorView& s = pq.scale_inv;
    const bool per_tensor = q.format == QuantFormat::kFp8 && q.block_n == 0;
    const int64_t sr = per_tensor ? 0 : q.format == QuantFormat::kFp8 ? n / q.block_n : n;
    const int64_t sc = per_tensor ? 0 : k / q.group_k();
    double v = code * scale_value(s, at(s, e, sr, sc));
    if (q.format == QuantFormat::kNvfp4)
        v *= static_cast<const float*>(pq.global_scale.data)[e * pq.global_scale.strides[0]];
    return v;
}

// The activation quantization of moex/quant.h on a row of K values, in its f32 arithmetic (dynamic: groups of
// `group`, scale amax / 448; static: the expert's scale). Inputs are first rounded to f32, as every backend holds them.
void quantize_activations(double* row, int64_t K, ActivationQuant scheme, int64_t group, float static_scale) {
    if (scheme == ActivationQuant::kStatic) {
        for (int64_t k = 0; k < K; ++k)
            row[k] = double(fp8e4m3_to_f32(f32_to_fp8e4m3(float(row[k]) / static_scale)) * static_scale);
        return;
    }
    for (int64_t k0 = 0; k0 < K; k0 += group) {
        const int64_t k1 = std::min(K, k0 + group);
        float amax = 0.0f;
        for (int64_t k = k0; k < k1; ++k) amax = std::fmax(amax, std::fabs(float(row[k])));
        if (amax == 0.0f) continue;
        const float s = amax / 448.0f, inv = dynamic_inverse(amax);
        for (int64_t k = k0; k < k1; ++k) row[k] = double(fp8e4m3_to_f32(f32_to_fp8e4m3(float(row[k]) * inv)) * s);
    }
}

// Expert e's weights as dense float64: up (N, H) and down (H, I) row-major whatever the stored layout.
void load_expert(const ExpertsProblem& p, int64_t e, std::vector<double>& up, std::vector<double>& down) {
    const TensorView &wu = p.gate_up_proj, &wd = p.down_proj;  // (E, N, H) | (E, H, N);  (E, H, I) | (E, I, H)
    const int64_t H = p.H(), I = p.I(), N = p.up_width();
    if (p.quant.enabled()) {
        for (int64_t n = 0; n < N; ++n)
            for (int64_t h = 0; h < H; ++h) up[n * H + h] = quantized_weight(p.quant, wu, p.quant.gate_up, e, n, h);
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < I; ++i) down[h * I + i] = quantized_weight(p.quant, wd, p.quant.down, e, h, i);
        return;
    }
    for (int64_t n = 0; n < N; ++n)
        for (int64_t h = 0; h < H; ++h)
            up[n * H + h] = load_as_double(wu, p.is_transposed ? at(wu, e, h, n) : at(wu, e, n, h));
    for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < I; ++i)
            down[h * I + i] = load_as_double(wd, p.is_transposed ? at(wd, e, i, h) : at(wd, e, h, i));
}

}  // namespace

double load_as_double(const TensorView& t, int64_t offset) {
    const void* d = t.data;
    switch (t.dtype) {
        case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(d)[offset]);
        case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(d)[offset]);
        case DType::kF32: return static_cast<const float*>(d)[offset];
        case DType::kF64: return static_cast<const double*>(d)[offset];
        case DType::kI32: return static_cast<const int32_t*>(d)[offset];
        case DType::kI64: return double(static_cast<const int64_t*>(d)[offset]);
        default: fail(ErrorCode::kUnsupported, "reference: unsupported dtype " + std::string(dtype_name(t.dtype)));
    }
}

double round_to(double x, DType dtype) {
    switch (dtype) {
        case DType::kBF16: return bf16_to_f32(f32_to_bf16(float(x)));
        case DType::kF16: return f16_to_f32(f32_to_f16(float(x)));
        case DType::kF32: return float(x);
        default: return x;
    }
}

void reference_experts(const ExpertsProblem& p, double* out, const ReferenceOptions& options) {
    MOEX_REQUIRE(p.device() == Device::kCPU, ErrorCode::kInvalidArgument, "reference_experts needs host tensors");
    const int64_t T = p.T(), H = p.H(), I = p.I(), E = p.E(), k = p.k(), N = p.up_width();
    std::fill(out, out + T * H, 0.0);
    if (options.term_magnitude) options.term_magnitude->assign(size_t(T * H), 0.0);
    std::vector<double> x(size_t(T * H));  // (T, H)
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h)
            x[size_t(t * H + h)] = load_as_double(p.hidden_states, at(p.hidden_states, t, h));
    std::vector<double> up(size_t(N * H)), down(size_t(H * I)), u(static_cast<size_t>(N)), hid(static_cast<size_t>(I));
    const ActivationQuant act = p.quant.enabled() ? p.quant.activations : ActivationQuant::kNone;
    auto scale_of = [](const ProjectionQuant& pq, int64_t e) {
        return static_cast<const float*>(pq.activation_scale.data)[e * pq.activation_scale.strides[0]];
    };
    // Expert by expert, so that each expert's weights are converted once; float64 makes the order immaterial.
    for (int64_t e = 0; e < E; ++e) {
        bool loaded = false;
        for (int64_t t = 0; t < T; ++t) {
            for (int64_t j = 0; j < k; ++j) {
                if (expert_id(p.top_k_index, t, j) != e) continue;  // ids outside [0, E) never match: exactly 0
                if (!loaded) load_expert(p, e, up, down), loaded = true;
                const double* xt = &x[size_t(t * H)];
                std::vector<double> xq;  // the token's GEMM input when activations are quantized
                if (act != ActivationQuant::kNone) {
                    xq.assign(xt, xt + H);
                    quantize_activations(xq.data(), H, act, p.quant.block_k > 0 ? p.quant.block_k : H,
                                         act == ActivationQuant::kStatic ? scale_of(p.quant.gate_up, e) : 0.0f);
                    xt = xq.data();
                }
                for (int64_t n = 0; n < N; ++n) {
                    double acc = 0.0;
                    for (int64_t h = 0; h < H; ++h) acc += up[size_t(n * H + h)] * xt[h];
                    if (p.gate_up_bias.defined()) acc += load_as_double(p.gate_up_bias, at(p.gate_up_bias, e, n));
                    u[size_t(n)] = acc;
                }
                for (int64_t i = 0; i < I; ++i) {
                    double v;
                    if (!p.has_gate)
                        v = activate(p.activation, u[i]);
                    else if (p.is_concatenated)
                        v = gated(p, u[i], u[I + i]);  // [gate | up]
                    else
                        v = gated(p, u[2 * i], u[2 * i + 1]);  // [g0, u0, g1, u1, ...]
                    hid[size_t(i)] = round_to(v, options.round_hidden_to);
                }
                if (act != ActivationQuant::kNone)
                    quantize_activations(hid.data(), I, act, p.quant.block_k > 0 ? p.quant.block_k : I,
                                         act == ActivationQuant::kStatic ? scale_of(p.quant.down, e) : 0.0f);
                const double w = load_as_double(p.top_k_weights, at(p.top_k_weights, t, j));
                for (int64_t h = 0; h < H; ++h) {
                    double y = 0.0;
                    for (int64_t i = 0; i < I; ++i) y += down[size_t(h * I + i)] * hid[size_t(i)];
                    if (p.down_bias.defined()) y += load_as_double(p.down_bias, at(p.down_bias, e, h));
                    out[t * H + h] += w * y;
                    if (options.term_magnitude) (*options.term_magnitude)[size_t(t * H + h)] += std::fabs(w * y);
                }
            }
        }
    }
}

}  // namespace moex::test
