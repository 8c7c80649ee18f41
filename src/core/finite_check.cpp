// The finite check: find the first output row that is not finite, then recompute that row in float64, slot by slot,
// in the order the kernels compute it (input, routing weight, up projection, gate, down projection, weighted sum),
// rounding where they round (f32 accumulators, h in the activation dtype), and name the first stage that breaks.
#include "src/core/finite_check.h"

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "moex/error.h"
#if MOEX_WITH_CUDA
#include "cuda/common/memory.h"
#endif

namespace moex::core {
namespace {

std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

std::string at(const char* name, std::initializer_list<int64_t> index) {
    std::string s = std::string(name) + "[";
    int d = 0;
    for (int64_t i : index) s += (d++ ? ", " : "") + std::to_string(i);
    return s + "]";
}

// Elements [first, first + count) of a contiguous tensor as the host sees them: a pointer into it on the CPU, a copy
// on CUDA. Scale dtypes decode as scales (uint8 scales are ue8m0 bytes, as mxfp4's are).
class HostSpan {
   public:
    HostSpan() = default;
    HostSpan(const TensorView& t, int64_t first, int64_t count) : dtype_(t.dtype) {
        const size_t size = size_t(dtype_size(t.dtype));
        const char* src = static_cast<const char*>(t.data) + size_t(first) * size;
        if (t.device == Device::kCPU) {
            data_ = src;
            return;
        }
        owned_.resize(size_t(count) * size);
#if MOEX_WITH_CUDA
        if (!owned_.empty()) cuda::copy_to_host(owned_.data(), src, owned_.size());
#else
        fail(ErrorCode::kUnsupported, "this build of moex has no CUDA support");
#endif
        data_ = owned_.data();
    }
    HostSpan(HostSpan&&) = default;
    HostSpan& operator=(HostSpan&&) = default;
    HostSpan(const HostSpan&) = delete;

    uint8_t byte(int64_t i) const { return reinterpret_cast<const uint8_t*>(data_)[i]; }
    int64_t integer(int64_t i) const {
        if (dtype_ == DType::kI64) return load<int64_t>(i);
        return load<int32_t>(i);
    }
    double value(int64_t i) const {
        switch (dtype_) {
            case DType::kBF16: return bf16_to_f32(load<uint16_t>(i));
            case DType::kF16: return f16_to_f32(load<uint16_t>(i));
            case DType::kF64: return load<double>(i);
            case DType::kFP8E4M3: return fp8e4m3_to_f32(byte(i));
            case DType::kUE8M0:
            case DType::kU8: return ue8m0_to_f32(byte(i));
            default: return load<float>(i);
        }
    }

   private:
    template <class V>
    V load(int64_t i) const {
        V v;
        std::memcpy(&v, data_ + size_t(i) * sizeof(V), sizeof(V));
        return v;
    }
    const char* data_ = nullptr;
    DType dtype_ = DType::kF32;
    std::vector<char> owned_;
};

bool finite_f32(double v) { return std::isfinite(static_cast<float>(v)); }

// v as the activation dtype holds it (via f32, as the kernels round); an overflow becomes an infinity.
double round_to(double v, DType d) {
    const float f = static_cast<float>(v);
    if (d == DType::kBF16) return bf16_to_f32(f32_to_bf16(f));
    if (d == DType::kF16) return f16_to_f32(f32_to_f16(f));
    return f;
}

// One expert's projection as a logical (N, K) matrix of values (the weight as the kernels see it, rounded to f32).
struct ExpertMatrix {
    const char* name;  // "gate_up_proj", "up_proj", "down_proj"
    int64_t e, N, K;
    bool transposed;  // storage (K, N)
    const ExpertsQuant* q = nullptr;
    HostSpan w, scale, global;
    int64_t scale_cols = 0;

    ExpertMatrix(const ExpertsProblem& p, const TensorView& t, const ProjectionQuant& pq, const char* name_, int64_t e_,
                 int64_t N_, int64_t K_)
        : name(name_), e(e_), N(N_), K(K_), transposed(p.is_transposed && !p.quant.enabled()) {
        const int64_t per_expert = p.quant.enabled() ? N * K / p.quant.per_byte() : N * K;
        w = HostSpan(t, e * per_expert, per_expert);
        if (!p.quant.enabled()) return;
        q = &p.quant;
        const TensorView& s = pq.scale_inv;
        scale_cols = s.shape[2];
        scale = HostSpan(s, e * s.shape[1] * s.shape[2], s.shape[1] * s.shape[2]);
        if (q->format == QuantFormat::kNvfp4) global = HostSpan(pq.global_scale, e, 1);
    }
    // The scale of element (n, k) times the global scale, and where it lives.
    double scale_of(int64_t n, int64_t k, std::string* where) const {
        const bool per_tensor = q->format == QuantFormat::kFp8 && q->block_n == 0;
        const int64_t sr = per_tensor ? 0 : q->format == QuantFormat::kFp8 ? n / q->block_n : n;
        const int64_t sc = per_tensor ? 0 : k / q->group_k();
        const double s = scale.value(sr * scale_cols + sc);
        const double g = q->format == QuantFormat::kNvfp4 ? global.value(0) : 1.0;
        if (where != nullptr) {
            *where = at((std::string(name) + "_scale_inv").c_str(), {e, sr, sc}) + " = " + num(s);
            if (q->format == QuantFormat::kNvfp4) *where += " (global scale " + num(g) + ")";
        }
        return s * g;
    }
    double code(int64_t n, int64_t k) const {
        if (q->format == QuantFormat::kFp8) return fp8e4m3_to_f32(w.byte(n * K + k));
        const uint8_t b = w.byte(n * (K / 2) + k / 2);
        return fp4e2m1_to_f32((k & 1) ? b >> 4 : b & 15u);
    }
    double value(int64_t n, int64_t k) const {
        if (q != nullptr) return static_cast<float>(code(n, k) * scale_of(n, k, nullptr));
        return w.value(transposed ? k * N + n : n * K + k);
    }
    // Why element (n, k) is not finite: the stored value, or its code or scale.
    std::string explain(int64_t n, int64_t k) const {
        if (q == nullptr) return at(name, {e, transposed ? k : n, transposed ? n : k}) + " = " + num(value(n, k));
        std::string where;
        const double s = scale_of(n, k, &where);
        if (!std::isfinite(code(n, k))) return at(name, {e, n, k}) + " is a NaN code";
        return at(name, {e, n, k}) + " = code " + num(code(n, k)) + " x scale " + num(s) + ", scale from " + where;
    }
};

struct Finding {
    int64_t slot = -1, expert = -1;
    std::string stage, detail;
};

// out = W v + b in float64, each sum checked as the f32 accumulator holds it; the first that is not finite is
// explained (a weight, the input, the bias, or the sum itself overflowing float32).
std::optional<std::string> project(const ExpertMatrix& m, const std::vector<double>& v, const HostSpan* bias,
                                   const char* bias_name, const char* input, std::vector<double>& out) {
    out.assign(size_t(m.N), 0.0);
    for (int64_t n = 0; n < m.N; ++n) {
        double s = bias != nullptr ? bias->value(n) : 0.0;
        for (int64_t k = 0; k < m.K; ++k) s += m.value(n, k) * v[size_t(k)];
        out[size_t(n)] = s;
        if (finite_f32(s)) continue;
        for (int64_t k = 0; k < m.K; ++k)
            if (!std::isfinite(m.value(n, k)))
                return "output " + std::to_string(n) + " = " + num(s) + ": " + m.explain(n, k);
        for (int64_t k = 0; k < m.K; ++k)
            if (!std::isfinite(v[size_t(k)]))
                return "output " + std::to_string(n) + " = " + num(s) + ": its input " + input + "[" +
                       std::to_string(k) + "] = " + num(v[size_t(k)]);
        if (bias != nullptr && !std::isfinite(bias->value(n)))
            return "output " + std::to_string(n) + ": " + at(bias_name, {m.e, n}) + " = " + num(bias->value(n));
        return "output " + std::to_string(n) + " = " + num(s) + " overflows the float32 accumulator";
    }
    return std::nullopt;
}

double activation(Activation a, double g) {
    switch (a) {
        case Activation::kSilu: return g / (1.0 + std::exp(-g));
        case Activation::kGelu: return 0.5 * g * (1.0 + std::erf(g / std::sqrt(2.0)));
        case Activation::kGeluTanh:
            return 0.5 * g * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
        case Activation::kRelu: return g > 0 ? g : 0.0;
    }
    return g;
}

// Static FP8 activation quantization of one value (x / s to e4m3, saturated, times s), as moex/quant.h defines it.
double static_quant(double x, double s) {
    const float q = static_cast<float>(x) / static_cast<float>(s);
    return double(fp8e4m3_to_f32(f32_to_fp8e4m3(q))) * s;
}

// Statically quantized input of a projection; a detail when the scale turns a finite input into a non-finite one.
std::optional<std::string> quantize_static(const ExpertsProblem& p, const ProjectionQuant& pq, const char* name,
                                           int64_t e, std::vector<double>& v) {
    if (!p.quant.enabled() || p.quant.activations != ActivationQuant::kStatic) return std::nullopt;
    const double s = HostSpan(pq.activation_scale, e, 1).value(0);
    for (size_t i = 0; i < v.size(); ++i) {
        const double qv = static_quant(v[i], s);
        if (std::isfinite(v[i]) && !std::isfinite(qv))
            return std::string("its static activation scale ") + name + "_activation_scale[" + std::to_string(e) +
                   "] = " + num(s) + " makes input " + std::to_string(i) + " (" + num(v[i]) + ") " + num(qv);
        v[i] = qv;
    }
    return std::nullopt;
}

// The first stage of slot (t, j), expert e, whose value is not finite; y gets the expert's output.
std::optional<Finding> trace_slot(const ExpertsProblem& p, const std::vector<double>& x, int64_t j, int64_t e,
                                  std::vector<double>& y) {
    const int64_t H = p.H(), I = p.I(), N = p.up_width();
    const DType dt = p.dtype();
    Finding f{j, e, "", ""};
    const char* up_name = p.has_gate ? "gate_up_proj" : "up_proj";
    const ExpertMatrix up(p, p.gate_up_proj, p.quant.gate_up, up_name, e, N, H);
    std::optional<HostSpan> up_bias, down_bias;
    if (p.gate_up_bias.defined()) up_bias.emplace(p.gate_up_bias, e * N, N);
    if (p.down_bias.defined()) down_bias.emplace(p.down_bias, e * H, H);

    std::vector<double> xin = x, u;
    if (auto why = quantize_static(p, p.quant.gate_up, up_name, e, xin)) return Finding{j, e, "up projection", *why};
    if (auto why = project(up, xin, up_bias ? &*up_bias : nullptr, "gate_up_proj_bias", "hidden_states row", u))
        return Finding{j, e, "up projection", *why};

    std::vector<double> h(static_cast<size_t>(I));
    for (int64_t i = 0; i < I; ++i) {
        double g = 0, v = 0, hv = 0;
        if (!p.has_gate) {
            v = u[size_t(i)];
            hv = activation(p.activation, v);
        } else {
            g = p.is_concatenated ? u[size_t(i)] : u[size_t(2 * i)];
            v = p.is_concatenated ? u[size_t(I + i)] : u[size_t(2 * i + 1)];
            if (p.gate == GateKind::kGptOss) {
                const double l = p.swiglu_limit;
                const double gc = std::min(g, l), vc = std::max(-l, std::min(v, l));
                hv = (vc + 1.0) * gc / (1.0 + std::exp(-double(p.swiglu_alpha) * gc));
            } else {
                hv = activation(p.activation, g) * v;
            }
        }
        h[size_t(i)] = round_to(hv, dt);
        if (std::isfinite(h[size_t(i)])) continue;
        f.stage = "activation";
        f.detail = "h[" + std::to_string(i) + "] = " + std::string(activation_name(p.activation)) +
                   (p.has_gate ? "(gate " + num(g) + ") x up " + num(v) : "(" + num(v) + ")") + " = " + num(hv) +
                   (std::isfinite(hv) ? ", beyond the largest " + std::string(dtype_name(dt)) : "");
        return f;
    }

    const ExpertMatrix down(p, p.down_proj, p.quant.down, "down_proj", e, H, I);
    if (auto why = quantize_static(p, p.quant.down, "down_proj", e, h)) return Finding{j, e, "down projection", *why};
    if (auto why = project(down, h, down_bias ? &*down_bias : nullptr, "down_proj_bias", "h", y))
        return Finding{j, e, "down projection", *why};
    return std::nullopt;
}

// Traces row t of the output; the finding names the first broken stage, or says the recomputation is finite.
Finding trace_row(const ExpertsProblem& p, int64_t t) {
    const int64_t H = p.H(), k = p.k(), E = p.E();
    const HostSpan ids(p.top_k_index, t * k, k), weights(p.top_k_weights, t * k, k), xs(p.hidden_states, t * H, H);
    std::vector<double> x(static_cast<size_t>(H));
    for (int64_t c = 0; c < H; ++c) x[size_t(c)] = xs.value(c);

    std::vector<int64_t> slots;  // the slots that count: ids in [0, E)
    std::string sentinels;
    for (int64_t j = 0; j < k; ++j) {
        const int64_t e = ids.integer(j);
        if (e >= 0 && e < E) {
            slots.push_back(j);
        } else {
            sentinels += (sentinels.empty() ? "" : ", ") + std::to_string(j) + " (id " + std::to_string(e) + ")";
        }
    }
    const std::string masked = sentinels.empty() ? "" : "; slots " + sentinels + " are outside [0, E) and add nothing";
    if (slots.empty()) return {-1, -1, "", "the row has no expert in [0, " + std::to_string(E) + ")" + masked};
    const int64_t e0 = ids.integer(slots[0]);
    for (int64_t c = 0; c < H; ++c)
        if (!std::isfinite(x[size_t(c)]))
            return {slots[0], e0, "input row", at("hidden_states", {t, c}) + " = " + num(x[size_t(c)])};

    std::vector<double> acc(size_t(H), 0.0), y;
    for (int64_t j : slots) {
        const int64_t e = ids.integer(j);
        const double w = weights.value(j);
        if (!std::isfinite(w)) return {j, e, "routing weight", at("top_k_weights", {t, j}) + " = " + num(w)};
        if (auto f = trace_slot(p, x, j, e, y)) return *f;
        for (int64_t c = 0; c < H; ++c) {
            acc[size_t(c)] += static_cast<float>(w) * static_cast<float>(y[size_t(c)]);
            if (!finite_f32(acc[size_t(c)]))
                return {
                    j, e, "weighted sum",
                    "column " + std::to_string(c) + " = " + num(acc[size_t(c)]) + " overflows float32 when adding it"};
        }
    }
    for (int64_t c = 0; c < H; ++c)
        if (!std::isfinite(round_to(acc[size_t(c)], p.dtype())))
            return {slots[0], e0, "weighted sum",
                    "column " + std::to_string(c) + " = " + num(acc[size_t(c)]) + " is beyond the largest " +
                        std::string(dtype_name(p.dtype()))};
    return {-1, -1, "", "every stage of its float64 recomputation is finite" + masked};
}

}  // namespace

bool finite_check_on(const RunOptions& options) {
    if (options.check_finite) return true;
    const char* env = std::getenv("MOEX_CHECK_FINITE");
    return env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0;
}

void check_finite(const ExpertsProblem& p, const TensorView& out, const RunOptions& options, std::string_view backend) {
    if (!finite_check_on(options) || p.T() == 0) return;
#if MOEX_WITH_CUDA
    if (out.device == Device::kCUDA) cuda::stream_synchronize(options.cuda_stream);
#endif
    const int64_t T = p.T(), H = p.H();
    const HostSpan o(out, 0, T * H);
    int64_t bad = -1;
    for (int64_t i = 0; i < T * H && bad < 0; ++i)
        if (!std::isfinite(o.value(i))) bad = i;
    if (bad < 0) return;
    const int64_t t = bad / H;
    const Finding f = trace_row(p, t);
    std::string msg = "finite check: " + std::string(backend) + " on " + std::string(device_name(p.device())) +
                      " gave " + at("out", {t, bad % H}) + " = " + num(o.value(bad)) +
                      ", the first non-finite value, in token row " + std::to_string(t) + " of " + std::to_string(T) +
                      "; ";
    if (f.expert >= 0) {
        msg += "first cause: expert " + std::to_string(f.expert) + " (slot " + std::to_string(f.slot) + "), " +
               f.stage + ": " + f.detail;
    } else {
        msg += "no input explains it (" + f.detail + "): the backend produced it";
    }
    fail(ErrorCode::kNonFinite, msg);
}

}  // namespace moex::core
