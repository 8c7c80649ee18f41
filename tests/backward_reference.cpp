// The float64 reference of the experts backward (backward_reference.h): the problem as dense logical arrays, its
// forward and its analytic backward, and the helpers the CPU and CUDA backward tests share.
#include "tests/backward_reference.h"

#include <algorithm>
#include <cmath>

namespace moex::test {
namespace {

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
}  // namespace

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

// loss = Σ dout ⊙ out; returns the loss and, when g is given, its gradients. round: h rounded as the backends do.
double forward_backward(const Dense& d, const std::vector<double>& dout, DType round, Grads64* g, Grads64* mag,
                        bool round_a) {
    const int64_t H = d.H, I = d.I, N = d.N;
    if (g) {
        g->x.assign(d.x.size(), 0), g->w.assign(d.w.size(), 0), g->wu.assign(d.wu.size(), 0);
        g->wd.assign(d.wd.size(), 0), g->bu.assign(d.bu.size(), 0), g->bd.assign(d.bd.size(), 0);
    }
    if (g && mag) mag->x.assign(d.x.size(), 0), mag->wu.assign(d.wu.size(), 0), mag->wd.assign(d.wd.size(), 0);
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
            a[size_t(n)] = round_a ? round_to(acc, round) : acc;
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
                if (mag) mag->wd[size_t((e * H + c) * I + i)] += std::fabs(w * dO[c] * h[size_t(i)]);
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
                if (mag) {
                    mag->wu[size_t((e * N + n) * H + c)] += std::fabs(da[size_t(n)] * x[c]);
                    mag->x[size_t(t * H + c)] += std::fabs(da[size_t(n)] * d.wu[size_t((e * N + n) * H + c)]);
                }
            }
        }
    }
    return loss;
}

std::vector<double> up_storage(const Dense& d, const std::vector<double>& v) { return in_storage(d, v, d.N, d.H); }
std::vector<double> down_storage(const Dense& d, const std::vector<double>& v) { return in_storage(d, v, d.H, d.I); }

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

// |got - ref| <= atol * rms(ref) + rtol * |ref| (+ slack) element-wise, NaN never passes.
::testing::AssertionResult close(const char* what, const TensorView& got, const std::vector<double>& ref, DType dt,
                                 const std::vector<double>* slack) {
    const double atol = dt == DType::kF32 ? 2e-5 : 1.2e-2, rtol = dt == DType::kF32 ? 2e-4 : 8e-3;
    double ss = 0;
    for (double r : ref) ss += r * r;
    const double rms = ref.empty() ? 0 : std::sqrt(ss / double(ref.size()));
    for (size_t i = 0; i < ref.size(); ++i) {
        const double g = load_as_double(got, int64_t(i));
        const double extra = slack ? (*slack)[i] : 0.0;
        if (!(std::fabs(g - ref[i]) <= atol * rms + rtol * std::fabs(ref[i]) + extra))
            return ::testing::AssertionFailure()
                   << what << "[" << i << "] = " << g << ", reference " << ref[i] << " (rms " << rms << ")";
    }
    return ::testing::AssertionSuccess();
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

}  // namespace moex::test
