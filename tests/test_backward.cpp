// The experts backward (moex/backward.h) against a float64 analytic backward written here, itself checked against
// central finite differences of its float64 forward: every layout x activation x {f32, bf16}, sentinels, experts no
// token reaches, T = 0, more rows per expert than one block, bitwise determinism across thread counts, refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "moex/backend.h"
#include "moex/backward.h"
#include "tests/test_support.h"

namespace moex::test {
namespace {

// ---- the float64 reference: the problem as dense logical arrays, its forward and its analytic backward ----

struct Dense {
    int64_t T, H, I, E, k, N;
    const ExpertsProblem* p;
    std::vector<double> x, wu, wd, bu, bd, w;  // (T, H), (E, N, H), (E, H, I), (E, N), (E, H), (T, k)
    std::vector<int64_t> ids;                  // (T, k)
};

Dense dense_of(const ExpertsProblem& p) {
    Dense d{p.T(), p.H(), p.I(), p.E(), p.k(), p.up_width(), &p, {}, {}, {}, {}, {}, {}, {}};
    const int64_t T = d.T, H = d.H, I = d.I, E = d.E, N = d.N, k = d.k;
    d.x.resize(size_t(T * H)), d.wu.resize(size_t(E * N * H)), d.wd.resize(size_t(E * H * I));
    d.w.resize(size_t(T * k)), d.ids.resize(size_t(T * k));
    for (int64_t i = 0; i < T * H; ++i) d.x[size_t(i)] = load_as_double(p.hidden_states, i);
    for (int64_t e = 0; e < E; ++e) {
        for (int64_t n = 0; n < N; ++n)
            for (int64_t h = 0; h < H; ++h)
                d.wu[size_t((e * N + n) * H + h)] =
                    load_as_double(p.gate_up_proj, p.is_transposed ? (e * H + h) * N + n : (e * N + n) * H + h);
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < I; ++i)
                d.wd[size_t((e * H + h) * I + i)] =
                    load_as_double(p.down_proj, p.is_transposed ? (e * I + i) * H + h : (e * H + h) * I + i);
    }
    d.bu.assign(size_t(E * N), 0.0), d.bd.assign(size_t(E * H), 0.0);
    if (p.gate_up_bias.defined())
        for (int64_t i = 0; i < E * N; ++i) d.bu[size_t(i)] = load_as_double(p.gate_up_bias, i);
    if (p.down_bias.defined())
        for (int64_t i = 0; i < E * H; ++i) d.bd[size_t(i)] = load_as_double(p.down_bias, i);
    for (int64_t i = 0; i < T * k; ++i)
        d.ids[size_t(i)] = expert_id(p.top_k_index, i / k, i % k), d.w[size_t(i)] = load_as_double(p.top_k_weights, i);
    return d;
}

// act(v) and act'(v) in float64.
void act64(Activation a, double v, double& f, double& df) {
    switch (a) {
        case Activation::kSilu: {
            const double s = 1 / (1 + std::exp(-v));
            f = v * s, df = s * (1 + v * (1 - s));
            return;
        }
        case Activation::kGelu: {
            const double c = 0.5 * (1 + std::erf(v / std::sqrt(2.0)));
            f = v * c, df = c + v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
            return;
        }
        case Activation::kGeluTanh: {
            const double c = std::sqrt(2 / M_PI), t = std::tanh(c * (v + 0.044715 * v * v * v));
            f = 0.5 * v * (1 + t), df = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * 0.044715 * v * v);
            return;
        }
        case Activation::kRelu: f = v > 0 ? v : 0, df = v > 0 ? 1 : 0; return;
    }
}

// h = gate(g, u) with dh/dg, dh/du (ungated: u only).
void gate64(const ExpertsProblem& p, double g, double u, double& h, double& dg, double& du) {
    if (!p.has_gate) {
        act64(p.activation, u, h, du), dg = 0;
        return;
    }
    if (p.gate == GateKind::kGptOss) {
        const double l = p.swiglu_limit, a = p.swiglu_alpha, gc = std::min(g, l), uc = std::clamp(u, -l, l);
        const double s = 1 / (1 + std::exp(-a * gc));
        h = (uc + 1) * gc * s;
        dg = g <= l ? (uc + 1) * s * (1 + a * gc * (1 - s)) : 0;
        du = -l <= u && u <= l ? gc * s : 0;
        return;
    }
    double f, df;
    act64(p.activation, g, f, df);
    h = f * u, dg = df * u, du = f;
}

void columns(const Dense& d, int64_t i, int64_t& cg, int64_t& cu) {
    if (!d.p->has_gate)
        cg = cu = i;
    else if (d.p->is_concatenated)
        cg = i, cu = d.I + i;
    else
        cg = 2 * i, cu = 2 * i + 1;
}

struct Grads64 {
    std::vector<double> x, w, wu, wd, bu, bd;  // logical layouts as in Dense
};

// loss = Σ dout ⊙ out; returns the loss and, when g is given, its gradients. round: h rounded as the backends do.
double forward_backward(const Dense& d, const std::vector<double>& dout, DType round, Grads64* g) {
    const int64_t H = d.H, I = d.I, N = d.N;
    if (g) {
        g->x.assign(d.x.size(), 0), g->w.assign(d.w.size(), 0), g->wu.assign(d.wu.size(), 0);
        g->wd.assign(d.wd.size(), 0), g->bu.assign(d.bu.size(), 0), g->bd.assign(d.bd.size(), 0);
    }
    double loss = 0;
    const size_t n_up = size_t(N), n_h = size_t(I);
    std::vector<double> a(n_up), h(n_h), dgv(n_h), duv(n_h), dh(n_h), da(n_up);
    for (int64_t s = 0; s < d.T * d.k; ++s) {
        const int64_t e = d.ids[size_t(s)], t = s / d.k;
        if (e < 0 || e >= d.E) continue;
        const double* x = &d.x[size_t(t * H)];
        const double* dO = &dout[size_t(t * H)];
        for (int64_t n = 0; n < N; ++n) {
            double acc = d.bu[size_t(e * N + n)];
            for (int64_t c = 0; c < H; ++c) acc += d.wu[size_t((e * N + n) * H + c)] * x[c];
            a[size_t(n)] = acc;
        }
        for (int64_t i = 0; i < I; ++i) {
            int64_t cg, cu;
            columns(d, i, cg, cu);
            gate64(*d.p, a[size_t(cg)], a[size_t(cu)], h[size_t(i)], dgv[size_t(i)], duv[size_t(i)]);
            h[size_t(i)] = round_to(h[size_t(i)], round);
        }
        const double w = d.w[size_t(s)];
        double dw = 0;
        for (int64_t c = 0; c < H; ++c) {
            double y = d.bd[size_t(e * H + c)];
            for (int64_t i = 0; i < I; ++i) y += d.wd[size_t((e * H + c) * I + i)] * h[size_t(i)];
            loss += dO[c] * w * y, dw += dO[c] * y;
        }
        if (!g) continue;
        g->w[size_t(s)] = dw;
        std::fill(dh.begin(), dh.end(), 0.0);
        for (int64_t c = 0; c < H; ++c) {
            g->bd[size_t(e * H + c)] += w * dO[c];
            for (int64_t i = 0; i < I; ++i) {
                g->wd[size_t((e * H + c) * I + i)] += w * dO[c] * h[size_t(i)];
                dh[size_t(i)] += w * dO[c] * d.wd[size_t((e * H + c) * I + i)];
            }
        }
        std::fill(da.begin(), da.end(), 0.0);
        for (int64_t i = 0; i < I; ++i) {
            int64_t cg, cu;
            columns(d, i, cg, cu);
            if (d.p->has_gate) da[size_t(cg)] = dh[size_t(i)] * dgv[size_t(i)];
            da[size_t(cu)] = dh[size_t(i)] * duv[size_t(i)];
        }
        for (int64_t n = 0; n < N; ++n) {
            g->bu[size_t(e * N + n)] += da[size_t(n)];
            for (int64_t c = 0; c < H; ++c) {
                g->wu[size_t((e * N + n) * H + c)] += da[size_t(n)] * x[c];
                g->x[size_t(t * H + c)] += da[size_t(n)] * d.wu[size_t((e * N + n) * H + c)];
            }
        }
    }
    return loss;
}

// The reference's logical weight gradients, (E, R, C) per expert, in the problem's storage layout: (E, C, R) when
// the weights are transposed.
std::vector<double> in_storage(const Dense& d, const std::vector<double>& v, int64_t R, int64_t C) {
    if (!d.p->is_transposed) return v;
    std::vector<double> s(v.size());
    for (int64_t e = 0; e < d.E; ++e)
        for (int64_t r = 0; r < R; ++r)
            for (int64_t c = 0; c < C; ++c) s[size_t((e * C + c) * R + r)] = v[size_t((e * R + r) * C + c)];
    return s;
}
std::vector<double> up_storage(const Dense& d, const std::vector<double>& v) { return in_storage(d, v, d.N, d.H); }
std::vector<double> down_storage(const Dense& d, const std::vector<double>& v) { return in_storage(d, v, d.H, d.I); }

// ---- the harness -------------------------------------------------------------------------------------------------

// Gradient buffers shaped like the problem's inputs, poisoned with NaN before each run.
struct GradBuffers {
    Tensor x, w, up, down, bu, bd;
    ExpertsGrads views;
    explicit GradBuffers(const ExpertsProblem& p) {
        auto like = [](const TensorView& v) { return Tensor(v.dtype, v.shape, v.ndim); };
        x = like(p.hidden_states), w = like(p.top_k_weights), up = like(p.gate_up_proj), down = like(p.down_proj);
        views = {x.view(), w.view(), up.view(), down.view(), {}, {}};
        if (p.gate_up_bias.defined()) bu = like(p.gate_up_bias), views.gate_up_bias = bu.view();
        if (p.down_bias.defined()) bd = like(p.down_bias), views.down_bias = bd.view();
        poison();
    }
    void poison() const {
        for (const Tensor* t : {&x, &w, &up, &down, &bu, &bd})
            if (t->data()) std::memset(t->data(), 0xff, size_t(t->nbytes()));
    }
};

Tensor grad_out_for(const ExpertsProblem& p, uint64_t seed) {
    Tensor g(p.dtype(), {p.T(), p.H()});
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < p.T() * p.H(); ++i) {  // uniform in [-1, 1), never exactly 0
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double v = (double(s >> 11) / double(1ull << 53)) * 2 - 1;
        store_from_double(g.view(), i, v == 0 ? 0.25 : v);
    }
    return g;
}

std::vector<double> as_doubles(const TensorView& t) {
    std::vector<double> v(size_t(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = load_as_double(t, i);
    return v;
}

// |got - ref| <= atol * rms(ref) + rtol * |ref| element-wise, NaN never passes.
::testing::AssertionResult close(const char* what, const TensorView& got, const std::vector<double>& ref, DType dt) {
    const double atol = dt == DType::kF32 ? 2e-5 : 1.2e-2, rtol = dt == DType::kF32 ? 2e-4 : 8e-3;
    double ss = 0;
    for (double r : ref) ss += r * r;
    const double rms = ref.empty() ? 0 : std::sqrt(ss / double(ref.size()));
    for (size_t i = 0; i < ref.size(); ++i) {
        const double g = load_as_double(got, int64_t(i));
        if (!(std::fabs(g - ref[i]) <= atol * rms + rtol * std::fabs(ref[i])))
            return ::testing::AssertionFailure()
                   << what << "[" << i << "] = " << g << ", reference " << ref[i] << " (rms " << rms << ")";
    }
    return ::testing::AssertionSuccess();
}

void expect_matches_reference(const ExpertsProblem& p, const Tensor& dout, const GradBuffers& b) {
    const Dense d = dense_of(p);
    Grads64 r;
    forward_backward(d, as_doubles(dout.view()), p.dtype() == DType::kF32 ? DType::kF64 : p.dtype(), &r);
    const DType dt = p.dtype();
    EXPECT_TRUE(close("dx", b.x.view(), r.x, dt));
    EXPECT_TRUE(close("dw", b.w.view(), r.w, dt));
    EXPECT_TRUE(close("d gate_up_proj", b.up.view(), up_storage(d, r.wu), dt));
    EXPECT_TRUE(close("d down_proj", b.down.view(), down_storage(d, r.wd), dt));
    if (p.gate_up_bias.defined()) EXPECT_TRUE(close("d gate_up_bias", b.bu.view(), r.bu, dt));
    if (p.down_bias.defined()) EXPECT_TRUE(close("d down_bias", b.bd.view(), r.bd, dt));
}

std::vector<Variant> all_layouts(DType dt) {
    std::vector<Variant> out;
    for (int layout = 0; layout < 3; ++layout)  // stacked, interleaved, ungated
        for (bool transposed : {false, true})
            for (bool bias : {false, true})
                for (int act = 0; act < 5; ++act) {  // silu, gelu, gelu tanh, relu, gpt_oss
                    if (layout == 2 && act == 4) continue;
                    Variant v;
                    v.dtype = dt, v.has_gate = layout != 2, v.concatenated = layout != 1;
                    v.transposed = transposed, v.bias = bias;
                    v.gate = act == 4 ? GateKind::kGptOss : GateKind::kDefault;
                    v.activation = act == 4 ? Activation::kSilu : Activation(act);
                    v.weights_f32 = (layout + act) % 2 == 0;  // routing weights in f32 and in the activation dtype
                    v.ids_i64 = bias;
                    out.push_back(v);
                }
    return out;
}

// Expert `unhit` never reached (its slots become sentinels), plus sentinels E and E + 1000 with NaN weights.
void add_sentinels(HostProblem& hp, int64_t T, int64_t k, int64_t E, int64_t unhit) {
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < k; ++j)
            if (hp.id(t, j) == unhit) hp.set_id(t, j, E + 1000), hp.set_weight(t, j, NAN);
    hp.set_id(0, 1, E), hp.set_weight(0, 1, NAN);
    hp.set_id(T - 1, 0, E), hp.set_weight(T - 1, 0, NAN);
}

TEST(Backward, ReferenceForwardIsTheReference) {
    for (const Variant& v : all_layouts(DType::kF32)) {
        SCOPED_TRACE(v.name());
        HostProblem hp(5, 8, 6, 4, 2, v, 7);
        const ExpertsProblem& p = hp.problem();
        const std::vector<double> ref = reference_of(p);
        const Tensor dout = grad_out_for(p, 3);
        const std::vector<double> dO = as_doubles(dout.view());
        double want = 0;
        for (size_t i = 0; i < ref.size(); ++i) want += dO[i] * ref[i];
        EXPECT_NEAR(forward_backward(dense_of(p), dO, DType::kF64, nullptr), want, 1e-12 * (1 + std::fabs(want)));
    }
}

TEST(Backward, ReferenceMatchesFiniteDifferences) {
    for (const Variant& v : all_layouts(DType::kF32)) {
        if (v.activation == Activation::kRelu) continue;  // kinks: finite differences are not its derivative there
        SCOPED_TRACE(v.name());
        HostProblem hp(3, 4, 3, 3, 2, v, 11);
        Dense d = dense_of(hp.problem());
        const std::vector<double> dO = as_doubles(grad_out_for(hp.problem(), 5).view());
        Grads64 g;
        forward_backward(d, dO, DType::kF64, &g);
        const double eps = 1e-6;
        auto check = [&](std::vector<double>& param, const std::vector<double>& grad, const char* name) {
            for (size_t i = 0; i < param.size(); ++i) {
                const double keep = param[i];
                param[i] = keep + eps;
                const double up = forward_backward(d, dO, DType::kF64, nullptr);
                param[i] = keep - eps;
                const double down = forward_backward(d, dO, DType::kF64, nullptr);
                param[i] = keep;
                EXPECT_NEAR((up - down) / (2 * eps), grad[i], 1e-6 * (1 + std::fabs(grad[i])))
                    << name << "[" << i << "]";
            }
        };
        check(d.x, g.x, "x"), check(d.w, g.w, "w"), check(d.wu, g.wu, "wu"), check(d.wd, g.wd, "wd");
        check(d.bu, g.bu, "bu"), check(d.bd, g.bd, "bd");
    }
}

TEST(Backward, EveryLayoutAndActivationMatchesReference) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
        uint64_t seed = 100;
        for (const Variant& v : all_layouts(dt)) {
            SCOPED_TRACE(v.name());
            const int64_t T = 13, E = 6, k = 3;
            HostProblem hp(T, 24, 20, E, k, v, ++seed);
            add_sentinels(hp, T, k, E, /*unhit=*/5);
            const ExpertsProblem& p = hp.problem();
            const Tensor dout = grad_out_for(p, seed);
            GradBuffers b(p);
            experts_backward(p, dout.view(), b.views, 2);
            expect_matches_reference(p, dout, b);
        }
    }
}

TEST(Backward, Float16MatchesReference) {
    Variant v;
    v.dtype = DType::kF16, v.bias = true, v.concatenated = false;
    HostProblem hp(9, 16, 12, 4, 2, v, 3);
    const Tensor dout = grad_out_for(hp.problem(), 4);
    GradBuffers b(hp.problem());
    experts_backward(hp.problem(), dout.view(), b.views, 2);
    expect_matches_reference(hp.problem(), dout, b);  // f16 sits inside bf16's tolerance
}

TEST(Backward, ManyRowsPerExpertMatchReference) {  // more rows than one block (256) per expert
    Variant v;
    v.bias = true, v.transposed = true;
    HostProblem hp(300, 16, 8, 2, 2, v, 21);
    const Tensor dout = grad_out_for(hp.problem(), 22);
    GradBuffers b(hp.problem());
    experts_backward(hp.problem(), dout.view(), b.views, 2);
    expect_matches_reference(hp.problem(), dout, b);
}

TEST(BackwardDeterminism, BitwiseForAnyThreadCount) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
        Variant v;
        v.dtype = dt, v.bias = true, v.weights_f32 = false;
        HostProblem hp(300, 40, 24, 5, 3, v, 31);
        add_sentinels(hp, 300, 3, 5, 4);
        const Tensor dout = grad_out_for(hp.problem(), 32);
        GradBuffers one(hp.problem()), two(hp.problem()), three(hp.problem());
        experts_backward(hp.problem(), dout.view(), one.views, 1);
        experts_backward(hp.problem(), dout.view(), two.views, 2);
        experts_backward(hp.problem(), dout.view(), three.views, 3);
        for (const GradBuffers* o : {&two, &three}) {
            EXPECT_TRUE(bitwise_equal(one.x, o->x));
            EXPECT_TRUE(bitwise_equal(one.w, o->w));
            EXPECT_TRUE(bitwise_equal(one.up, o->up));
            EXPECT_TRUE(bitwise_equal(one.down, o->down));
            EXPECT_TRUE(bitwise_equal(one.bu, o->bu));
            EXPECT_TRUE(bitwise_equal(one.bd, o->bd));
        }
    }
}

TEST(Backward, CpuBackendsShareOneBackward) {
    Variant v;
    v.dtype = DType::kBF16;
    HostProblem hp(17, 32, 16, 4, 2, v, 41);
    const Tensor dout = grad_out_for(hp.problem(), 42);
    GradBuffers want(hp.problem());
    experts_backward(hp.problem(), dout.view(), want.views);
    const ExpertsInterface& reg = ExpertsInterface::global();
    for (const char* name : {"eager", "batched_mm", "grouped_mm"}) {
        SCOPED_TRACE(name);
        EXPECT_TRUE(reg.get(name).has_backward(Device::kCPU));
        EXPECT_FALSE(reg.get(name).has_backward(Device::kCUDA));
        GradBuffers got(hp.problem());
        reg.backward(name, hp.problem(), dout.view(), got.views);
        EXPECT_TRUE(bitwise_equal(want.up, got.up) && bitwise_equal(want.x, got.x) && bitwise_equal(want.w, got.w));
    }
    EXPECT_EQ(reg.backward_names_text(Device::kCPU), "eager, batched_mm, grouped_mm");
    EXPECT_FALSE(reg.get("sonicmoe").has_backward(Device::kCPU));
    expect_error([&] { reg.backward("sonicmoe", hp.problem(), dout.view(), want.views); }, ErrorCode::kUnsupported,
                 "backends with one there: eager, batched_mm, grouped_mm");
}

TEST(Backward, OnlyTheRequestedGradients) {
    Variant v;
    v.bias = true;
    HostProblem hp(11, 16, 8, 3, 2, v, 51);
    const Tensor dout = grad_out_for(hp.problem(), 52);
    GradBuffers all(hp.problem()), some(hp.problem());
    experts_backward(hp.problem(), dout.view(), all.views);
    ExpertsGrads only_w;
    only_w.top_k_weights = some.w.view();
    only_w.down_bias = some.bd.view();
    experts_backward(hp.problem(), dout.view(), only_w);
    EXPECT_TRUE(bitwise_equal(all.w, some.w));
    EXPECT_TRUE(bitwise_equal(all.bd, some.bd));
    const auto* x = static_cast<const uint32_t*>(some.x.data());
    EXPECT_EQ(x[0], 0xffffffffu);  // not asked for: untouched
}

TEST(Backward, NoTokens) {
    Variant v;
    v.bias = true;
    HostProblem hp(0, 16, 8, 3, 2, v, 61);
    const Tensor dout(DType::kF32, {0, 16});
    GradBuffers b(hp.problem());
    experts_backward(hp.problem(), dout.view(), b.views);
    for (const Tensor* t : {&b.up, &b.down, &b.bu, &b.bd})
        for (double g : as_doubles(t->view())) ASSERT_EQ(g, 0.0);
}

TEST(Backward, QuantizedWeightsRefusedByFormat) {
    HostProblem hp(4, 128, 128, 2, 1, Variant{}, 71);
    ExpertsProblem p = hp.problem();
    GradBuffers b(p);
    const QuantizedExperts q = quantize_experts(p, QuantFormat::kFp8);
    const Tensor dout = grad_out_for(p, 72);
    expect_error([&] { experts_backward(p, dout.view(), b.views); }, ErrorCode::kUnsupported, "quantized (fp8_block)");
}

TEST(Backward, DeviceWithoutBackwardRefused) {
    HostProblem hp(4, 16, 8, 2, 1, Variant{}, 81);
    ExpertsProblem p = hp.problem();
    Tensor dout = grad_out_for(p, 82);
    TensorView g = dout.view();
    for (TensorView* t : {&p.hidden_states, &p.top_k_index, &p.top_k_weights, &p.gate_up_proj, &p.down_proj, &g})
        t->device = Device::kCUDA;  // never dereferenced: refused first
    expect_error([&] { experts_backward(p, g, ExpertsGrads{}); }, ErrorCode::kUnsupported,
                 "on cpu: eager, batched_mm, grouped_mm");
    expect_error([&] { ExpertsInterface::global().backward("grouped_mm", p, g, ExpertsGrads{}); },
                 ErrorCode::kUnsupported, "`grouped_mm` has no backward on cuda; backends with one there: none yet");
}

TEST(Backward, BadGradientsNamed) {
    Variant v;
    HostProblem hp(4, 16, 8, 2, 1, v, 91);
    const Tensor dout = grad_out_for(hp.problem(), 92);
    GradBuffers b(hp.problem());
    ExpertsGrads g = b.views;
    g.down_proj = b.up.view();
    expect_error([&] { experts_backward(hp.problem(), dout.view(), g); }, ErrorCode::kInvalidArgument,
                 "grad down_proj has shape");
    g = b.views;
    Tensor bias(DType::kF32, {2, 16});
    g.down_bias = bias.view();
    expect_error([&] { experts_backward(hp.problem(), dout.view(), g); }, ErrorCode::kInvalidArgument,
                 "the problem has no down_proj_bias");
    const Tensor wrong(DType::kF32, {4, 15});
    expect_error([&] { experts_backward(hp.problem(), wrong.view(), b.views); }, ErrorCode::kInvalidArgument,
                 "grad_out has shape (4, 15)");
}

}  // namespace
}  // namespace moex::test
