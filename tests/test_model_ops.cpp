// The CPU Ops of the model runtime (src/model/ops/cpu_*.cpp) and make_rope_table (src/model/ops/rope_table.cpp): each
// op against a float64 reference written here, on fresh random data, outputs poisoned with NaN, f32 and bf16,
// row-strided views (sub-blocks of wider rows, whose padding must stay untouched); rope tables against numbers from
// transformers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "moex/error.h"
#include "src/model/ops/ops.h"

namespace moex::model {
namespace {

// A (rows, cols) view into the middle of a (rows, cols + 2 pad) host buffer; every byte starts as 0xff (NaN).
struct Mat {
    Tensor storage;
    TensorView v;
    int64_t pad = 0;
};
Mat make_mat(DType dt, int64_t rows, int64_t cols, int64_t pad = 0) {
    Mat m{Tensor(dt, {rows, cols + 2 * pad}), {}, pad};
    std::memset(m.storage.data(), 0xff, size_t(m.storage.nbytes()));
    m.v = m.storage.view();
    m.v.data = static_cast<char*>(m.storage.data()) + pad * dtype_size(dt);
    m.v.shape[1] = cols;
    return m;
}
double get(const TensorView& v, int64_t r, int64_t c) {
    const int64_t i = r * v.strides[0] + c;
    if (v.dtype == DType::kBF16) return bf16_to_f32(v.ptr<uint16_t>()[i]);
    return v.ptr<float>()[i];
}
void set(const TensorView& v, int64_t r, int64_t c, double x) {
    const int64_t i = r * v.strides[0] + c;
    if (v.dtype == DType::kBF16)
        v.ptr<uint16_t>()[i] = f32_to_bf16(float(x));
    else
        v.ptr<float>()[i] = float(x);
}
Mat random_mat(DType dt, int64_t rows, int64_t cols, std::mt19937_64& rng, int64_t pad = 0, double scale = 1.0) {
    Mat m = make_mat(dt, rows, cols, pad);
    std::normal_distribution<double> n(0.0, scale);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) set(m.v, r, c, n(rng));
    return m;
}
TensorView vec_view(const Mat& m) {  // a (1, n) matrix as the (n) vector ops take for weights
    TensorView v = m.v;
    v.ndim = 1, v.shape[0] = m.v.shape[1], v.strides[0] = 1;
    return v;
}

::testing::AssertionResult padding_untouched(const Mat& m, const std::string& what) {
    const int64_t C = m.v.shape[1], es = dtype_size(m.v.dtype);
    for (int64_t r = 0; r < m.v.shape[0]; ++r) {
        const auto* row = static_cast<const unsigned char*>(m.storage.data()) + r * m.v.strides[0] * es;
        for (int64_t b = 0; b < m.pad * es; ++b)
            if (row[b] != 0xff || row[(m.pad + C) * es + b] != 0xff)
                return ::testing::AssertionFailure() << what << ": padding of row " << r << " was written";
    }
    return ::testing::AssertionSuccess();
}

// Compares a view with a dense (rows, cols) reference, and checks that the padding of m kept its 0xff bytes.
// Per-dtype tolerance: |got - ref| <= atol * rms(ref) + rtol * |ref|; bf16 ops round up to three times.
::testing::AssertionResult close(const Mat& m, const std::vector<double>& ref, const std::string& what = "") {
    const int64_t R = m.v.shape[0], C = m.v.shape[1];
    double ss = 0;
    for (double x : ref) ss += x * x;
    const double rms = ref.empty() ? 1.0 : std::sqrt(ss / double(ref.size()));
    const bool f32 = m.v.dtype == DType::kF32;
    const double atol = f32 ? 2e-5 : 1.2e-2, rtol = f32 ? 2e-5 : 1e-2;
    for (int64_t r = 0; r < R; ++r) {
        for (int64_t c = 0; c < C; ++c) {
            const double g = get(m.v, r, c), e = ref[size_t(r * C + c)];
            if (!(std::fabs(g - e) <= atol * rms + rtol * std::fabs(e)))
                return ::testing::AssertionFailure()
                       << what << " (" << r << ", " << c << "): got " << g << ", want " << e << " (rms " << rms << ")";
        }
    }
    return padding_untouched(m, what);
}

const DType kDtypes[] = {DType::kF32, DType::kBF16};
std::string name(DType dt) { return std::string(dtype_name(dt)); }

TEST(ModelOpsCpu, Linear) {
    auto ops = make_cpu_ops(2);
    std::mt19937_64 rng(1);
    const int64_t K = 96, N = 70;
    for (DType dt : kDtypes)
        for (int64_t T : {1, 3, 40})                         // streaming (<= 24 rows) and packed GEMM paths
            for (int variant = 0; variant < 3; ++variant) {  // 0 plain, 1 bias + strided, 2 f32 out
                const bool bias = variant == 1;
                const int64_t pad = variant == 1 ? 5 : 0;
                Mat x = random_mat(dt, T, K, rng, pad), w = random_mat(dt, N, K, rng, 0, 0.1);
                Mat b = random_mat(dt, 1, N, rng);
                Mat out = make_mat(variant == 2 ? DType::kF32 : dt, T, N, pad);
                ops->linear(x.v, w.v, bias ? vec_view(b) : TensorView{}, out.v);
                std::vector<double> ref(size_t(T * N));
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t n = 0; n < N; ++n) {
                        double s = bias ? get(b.v, 0, n) : 0.0;
                        for (int64_t k = 0; k < K; ++k) s += get(x.v, t, k) * get(w.v, n, k);
                        ref[size_t(t * N + n)] = s;
                    }
                EXPECT_TRUE(
                    close(out, ref, name(dt) + " T=" + std::to_string(T) + " variant " + std::to_string(variant)));
            }
}

TEST(ModelOpsCpu, RmsNorm) {
    auto ops = make_cpu_ops(2);
    std::mt19937_64 rng(2);
    const double eps = 1e-6;
    struct Case {
        int64_t T, D, groups, pad;
        bool in_place;
    };
    const Case cases[] = {{3, 32, 1, 0, false}, {5, 16, 4, 3, true}, {2, 64, 1, 7, false}, {64, 128, 8, 0, false}};
    for (DType dt : kDtypes)
        for (const Case& c : cases) {
            const int64_t C = c.D * c.groups;
            Mat x = random_mat(dt, c.T, C, rng, c.pad, 2.0), w = random_mat(dt, 1, c.D, rng);
            std::vector<double> ref(size_t(c.T * C));
            for (int64_t t = 0; t < c.T; ++t)
                for (int64_t g = 0; g < C; g += c.D) {
                    double ss = 0;
                    for (int64_t i = 0; i < c.D; ++i) ss += get(x.v, t, g + i) * get(x.v, t, g + i);
                    const double r = 1.0 / std::sqrt(ss / double(c.D) + eps);
                    for (int64_t i = 0; i < c.D; ++i)
                        ref[size_t(t * C + g + i)] = get(w.v, 0, i) * get(x.v, t, g + i) * r;
                }
            Mat out = c.in_place ? x : make_mat(dt, c.T, C, c.pad);
            ops->rms_norm(x.v, vec_view(w), eps, out.v);
            EXPECT_TRUE(close(out, ref, name(dt) + " D=" + std::to_string(c.D)));
        }
}

TEST(ModelOpsCpu, RopeRotatesHalfOverTheRotaryDims) {
    auto ops = make_cpu_ops(2);
    std::mt19937_64 rng(3);
    RopeConfig yarn;
    yarn.type = "yarn", yarn.factor = 4.0, yarn.original_max_position_embeddings = 256;
    RopeConfig partial;
    partial.partial_rotary_factor = 0.5;
    const RopeTable tables[] = {make_rope_table(RopeConfig{}, 16), make_rope_table(yarn, 16),
                                make_rope_table(partial, 16)};
    for (DType dt : kDtypes)
        for (const RopeTable& tab : tables)
            for (int64_t pos0 : {0, 37}) {
                const int64_t T = 4, D = 16, heads = 3, half = tab.rotary_dim / 2;
                Mat x = random_mat(dt, T, heads * D, rng, 2);
                std::vector<double> ref(size_t(T * heads * D));
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t h = 0; h < heads; ++h)
                        for (int64_t i = 0; i < D; ++i) {
                            const int64_t c = h * D + i;
                            double y = get(x.v, t, c);
                            if (i < tab.rotary_dim) {
                                const int64_t f = i % half;
                                const double a = double(pos0 + t) * tab.inv_freq[size_t(f)];
                                const double cs = std::cos(a) * tab.attention_scaling;
                                const double sn = std::sin(a) * tab.attention_scaling;
                                const double x1 = get(x.v, t, h * D + f), x2 = get(x.v, t, h * D + half + f);
                                y = i < half ? x1 * cs - x2 * sn : x2 * cs + x1 * sn;
                            }
                            ref[size_t(t * heads * D + c)] = y;
                        }
                ops->qk_norm_rope(x.v, heads, D, {}, {}, 1e-6, pos0, tab);  // no norms: the rotation alone
                EXPECT_TRUE(close(x, ref, name(dt) + " rotary_dim " + std::to_string(tab.rotary_dim)));
                for (int64_t t = 0; t < T; ++t)  // pass-through dims are untouched
                    for (int64_t i = tab.rotary_dim; i < D; ++i)
                        EXPECT_EQ(get(x.v, t, i), ref[size_t(t * heads * D + i)]);
            }
}

// qk_norm_rope with Qwen3's per-head norms: each q head normed with q_norm, each k head with k_norm, then rotated.
TEST(ModelOpsCpu, QkNormRopeNormsEachHeadThenRotates) {
    auto ops = make_cpu_ops(2);
    std::mt19937_64 rng(11);
    const RopeTable tab = make_rope_table(RopeConfig{}, 16);
    const double eps = 1e-6;
    for (DType dt : kDtypes) {
        const int64_t T = 3, D = 16, nq = 4, nkv = 2, half = D / 2, pos0 = 5, W = (nq + nkv) * D;
        Mat x = random_mat(dt, T, W, rng, 3, 2.0), qn = random_mat(dt, 1, D, rng), kn = random_mat(dt, 1, D, rng);
        std::vector<double> normed(size_t(T * W)), ref(size_t(T * W));
        for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < nq + nkv; ++h) {
                const Mat& w = h < nq ? qn : kn;
                double ss = 0;
                for (int64_t i = 0; i < D; ++i) ss += get(x.v, t, h * D + i) * get(x.v, t, h * D + i);
                const double r = 1.0 / std::sqrt(ss / double(D) + eps);
                for (int64_t i = 0; i < D; ++i)
                    normed[size_t(t * W + h * D + i)] = get(w.v, 0, i) * get(x.v, t, h * D + i) * r;
                for (int64_t i = 0; i < D; ++i) {
                    const int64_t f = i % half;
                    const double a = double(pos0 + t) * tab.inv_freq[size_t(f)];
                    const double x1 = normed[size_t(t * W + h * D + f)], x2 = normed[size_t(t * W + h * D + half + f)];
                    ref[size_t(t * W + h * D + i)] =
                        i < half ? x1 * std::cos(a) - x2 * std::sin(a) : x2 * std::cos(a) + x1 * std::sin(a);
                }
            }
        ops->qk_norm_rope(x.v, nq, D, vec_view(qn), vec_view(kn), eps, pos0, tab);
        EXPECT_TRUE(close(x, ref, name(dt) + " qk_norm_rope"));
    }
}

// q, k, v are column blocks of one fused (T, (nq + 2 nkv) D) row, as the model's qkv projection writes them.
void check_attention(DType dt, int64_t nq, int64_t nkv, int64_t T, int64_t pos0, int64_t window, uint64_t seed) {
    auto ops = make_cpu_ops(2);
    std::mt19937_64 rng(seed);
    const int64_t D = 16, qw = nq * D, kw = nkv * D, max_len = pos0 + T + 3;
    Mat qkv = random_mat(dt, T, qw + 2 * kw, rng);
    auto block = [&](int64_t c0, int64_t width) {
        TensorView v = qkv.v;
        v.data = static_cast<char*>(v.data) + c0 * dtype_size(dt);
        v.shape[1] = width;
        return v;
    };
    const TensorView q = block(0, qw), k = block(qw, kw), v = block(qw + kw, kw);
    Mat kc = make_mat(dt, max_len, kw, 1), vc = make_mat(dt, max_len, kw, 1);
    std::normal_distribution<double> nd;
    for (int64_t r = 0; r < pos0; ++r)  // the earlier part of the sequence
        for (int64_t c = 0; c < kw; ++c) {
            set(kc.v, r, c, nd(rng));
            set(vc.v, r, c, nd(rng));
        }
    Mat out = make_mat(dt, T, qw);
    const AttentionShape shape{nq, nkv, D, window, float(1.0 / std::sqrt(double(D)))};
    ops->attention(q, k, v, kc.v, vc.v, pos0, shape, out.v);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < kw; ++c) {
            ASSERT_EQ(get(kc.v, pos0 + t, c), get(k, t, c));
            ASSERT_EQ(get(vc.v, pos0 + t, c), get(v, t, c));
        }
    std::vector<double> ref(size_t(T * qw));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < nq; ++h) {
            const int64_t kh = h / (nq / nkv), qpos = pos0 + t;
            const int64_t lo = window > 0 ? std::max<int64_t>(0, qpos - window + 1) : 0;
            std::vector<double> s;
            for (int64_t j = lo; j <= qpos; ++j) {
                double d = 0;
                for (int64_t i = 0; i < D; ++i) d += get(q, t, h * D + i) * get(kc.v, j, kh * D + i);
                s.push_back(d * double(shape.scale));
            }
            const double mx = *std::max_element(s.begin(), s.end());
            double sum = 0;
            for (double& x : s) sum += (x = std::exp(x - mx));
            for (int64_t i = 0; i < D; ++i) {
                double o = 0;
                for (int64_t j = lo; j <= qpos; ++j) o += s[size_t(j - lo)] / sum * get(vc.v, j, kh * D + i);
                ref[size_t(t * qw + h * D + i)] = o;
            }
        }
    EXPECT_TRUE(close(out, ref,
                      name(dt) + " nq " + std::to_string(nq) + " nkv " + std::to_string(nkv) + " T " +
                          std::to_string(T) + " pos0 " + std::to_string(pos0) + " window " + std::to_string(window)));
    EXPECT_TRUE(padding_untouched(kc, "k_cache"));
    EXPECT_TRUE(padding_untouched(vc, "v_cache"));
}

TEST(ModelOpsCpu, AttentionGroupedQueryOverTheCache) {
    for (DType dt : kDtypes)
        for (int64_t ratio : {1, 2, 4}) {
            check_attention(dt, 4, 4 / ratio, 1, 0, 0, 10 + ratio);   // first token
            check_attention(dt, 4, 4 / ratio, 1, 12, 0, 20 + ratio);  // decode
            check_attention(dt, 4, 4 / ratio, 7, 0, 0, 30 + ratio);   // prefill
            check_attention(dt, 4, 4 / ratio, 9, 11, 0, 40 + ratio);  // a prefill continuing a cache
        }
    check_attention(DType::kF32, 8, 2, 70, 5, 0, 50);  // several token blocks per KV head
}

TEST(ModelOpsCpu, AttentionSlidingWindow) {
    for (DType dt : kDtypes) {
        check_attention(dt, 4, 2, 9, 11, 4, 60);  // window shorter than the cached prefix
        check_attention(dt, 4, 1, 1, 20, 3, 61);  // decode
        check_attention(dt, 2, 2, 6, 0, 2, 62);
    }
    check_attention(DType::kF32, 8, 2, 70, 5, 16, 63);
}

TEST(ModelOpsCpu, RouterTopkMatchesSoftmaxAndTorchTies) {
    auto ops = make_cpu_ops(2);
    std::mt19937_64 rng(4);
    for (DType dt : kDtypes)
        for (bool normalize : {false, true}) {
            const int64_t T = 5, E = 16, k = 4;
            Mat logits = random_mat(dt, T, E, rng, 2);
            Tensor ids(DType::kI32, {T, k});
            Mat w = make_mat(dt, T, k);
            ops->router_topk(logits.v, k, normalize, ids.view(), w.v);
            std::vector<double> ref(size_t(T * k));
            for (int64_t t = 0; t < T; ++t) {
                std::vector<double> p(static_cast<size_t>(E));
                double mx = -1e300, sum = 0, top = 0;
                for (int64_t e = 0; e < E; ++e) mx = std::max(mx, get(logits.v, t, e));
                for (int64_t e = 0; e < E; ++e) sum += (p[size_t(e)] = std::exp(get(logits.v, t, e) - mx));
                std::vector<int64_t> order(static_cast<size_t>(E));
                std::iota(order.begin(), order.end(), 0);
                std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
                for (int64_t j = 0; j < k; ++j) top += p[size_t(order[size_t(j)])] / sum;
                for (int64_t j = 0; j < k; ++j) {
                    EXPECT_EQ(ids.view().ptr<int32_t>()[t * k + j], order[size_t(j)]) << name(dt) << " t " << t;
                    ref[size_t(t * k + j)] = p[size_t(order[size_t(j)])] / sum / (normalize ? top : 1.0);
                }
            }
            EXPECT_TRUE(close(w, ref, name(dt) + (normalize ? " normalized" : "")));
        }
    // Equal probabilities: the order torch.topk(torch.softmax(logits, -1), k) returns on the CPU (torch 2.15), which
    // is not "lower index first": both its nth_element (k * 64 > E) and partial_sort (k * 64 <= E) paths.
    struct Tie {
        std::vector<float> logits;
        int64_t k;
        std::vector<int32_t> want;
    };
    std::vector<float> mod5(128);
    for (size_t j = 0; j < mod5.size(); ++j) mod5[j] = float(j % 5);
    const Tie ties[] = {
        {{0, 2, 2, 1, 2, -1, 2}, 3, {1, 6, 4}},
        {{1, 3, 0, 3, 2, 3, 3, -1, 2, 3, 0, 1, 3, 2, 2, 3}, 4, {12, 6, 9, 1}},
        {mod5, 2, {9, 4}},
        {mod5, 8, {29, 39, 89, 34, 94, 24, 19, 104}},
    };
    for (const Tie& tie : ties) {
        const int64_t E = int64_t(tie.logits.size());
        std::vector<float> l = tie.logits;
        Tensor ids(DType::kI32, {1, tie.k}), w(DType::kF32, {1, tie.k});
        ops->router_topk(TensorView::contiguous(l.data(), DType::kF32, {1, E}), tie.k, true, ids.view(), w.view());
        const int32_t* got = ids.view().ptr<int32_t>();
        EXPECT_EQ(std::vector<int32_t>(got, got + tie.k), tie.want) << "E " << E << " k " << tie.k;
    }
}

TEST(ModelOpsCpu, GatedActRoundsTheActivationThenTheProduct) {
    auto ops = make_cpu_ops(2);
    std::mt19937_64 rng(5);
    const Activation acts[] = {Activation::kSilu, Activation::kGelu, Activation::kGeluTanh, Activation::kRelu};
    for (DType dt : kDtypes)
        for (Activation act : acts) {
            const int64_t T = 3, I = 37;
            Mat gu = random_mat(dt, T, 2 * I, rng, 0, 2.0);
            Mat out = make_mat(dt, T, I, 4);
            ops->gated_act(gu.v, act, out.v);
            std::vector<double> ref(size_t(T * I));
            for (int64_t t = 0; t < T; ++t)
                for (int64_t i = 0; i < I; ++i) {
                    const double g = get(gu.v, t, i), u = get(gu.v, t, I + i);
                    double a = 0;
                    if (act == Activation::kSilu) a = g / (1 + std::exp(-g));
                    if (act == Activation::kGelu) a = 0.5 * g * (1 + std::erf(g / std::sqrt(2.0)));
                    if (act == Activation::kGeluTanh)
                        a = 0.5 * g * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
                    if (act == Activation::kRelu) a = g > 0 ? g : 0;
                    ref[size_t(t * I + i)] = a * u;
                }
            EXPECT_TRUE(close(out, ref, name(dt) + " " + std::string(activation_name(act))));
        }
}

TEST(ModelOpsCpu, AddRmsNormClampSigmoidGateAddEmbed) {
    auto ops = make_cpu_ops(2);
    std::mt19937_64 rng(6);
    for (DType dt : kDtypes) {
        const int64_t T = 4, H = 50;
        Mat a = random_mat(dt, T, H, rng, 3), b = random_mat(dt, T, H, rng);
        std::vector<double> sum(size_t(T * H)), clamped(size_t(T * H)), gated(size_t(T * H));
        Mat gate = random_mat(dt, T, 1, rng, 1), x = random_mat(dt, T, H, rng);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h) {
                const size_t i = size_t(t * H + h);
                sum[i] = get(a.v, t, h) + get(x.v, t, h);
                clamped[i] = std::clamp(get(a.v, t, h), -0.75, 0.75);
                gated[i] = get(b.v, t, h) + get(x.v, t, h) / (1 + std::exp(-get(gate.v, t, 0)));
            }
        Mat c = make_mat(dt, T, H, 3);  // a copy of a
        std::memcpy(c.storage.data(), a.storage.data(), size_t(a.storage.nbytes()));
        ops->clamp(c.v, 0.75f);
        EXPECT_TRUE(close(c, clamped, name(dt) + " clamp"));
        ops->sigmoid_gate_add(gate.v, x.v, b.v);
        EXPECT_TRUE(close(b, gated, name(dt) + " sigmoid_gate_add"));
        // add_rms_norm: the sum (into a) and the norm of the rounded sum; the sum rounds as one op would.
        Mat w = random_mat(dt, 1, H, rng), normed = make_mat(dt, T, H, 1);
        ops->add_rms_norm(a.v, x.v, a.v, vec_view(w), 1e-6, normed.v);  // sum aliases a
        EXPECT_TRUE(close(a, sum, name(dt) + " add_rms_norm sum"));
        std::vector<double> norm_ref(size_t(T * H));
        for (int64_t t = 0; t < T; ++t) {
            double ss = 0;
            for (int64_t h = 0; h < H; ++h) ss += get(a.v, t, h) * get(a.v, t, h);
            const double r = 1.0 / std::sqrt(ss / double(H) + 1e-6);
            for (int64_t h = 0; h < H; ++h) norm_ref[size_t(t * H + h)] = get(w.v, 0, h) * get(a.v, t, h) * r;
        }
        EXPECT_TRUE(close(normed, norm_ref, name(dt) + " add_rms_norm norm"));

        Mat table = random_mat(dt, 9, H, rng);
        const int32_t tok[] = {3, 0, 8, 3};
        Mat e = make_mat(dt, 4, H, 2);
        ops->embed(tok, 4, table.v, e.v);
        std::vector<double> rows;
        for (int32_t id : tok)
            for (int64_t h = 0; h < H; ++h) rows.push_back(get(table.v, id, h));
        EXPECT_TRUE(close(e, rows, name(dt) + " embed"));
        const int32_t bad[] = {9};
        EXPECT_THROW(ops->embed(bad, 1, table.v, make_mat(dt, 1, H).v), Error);
    }
    // clamp keeps NaN, as torch.clamp
    float v[3] = {std::nanf(""), 5.0f, -5.0f};
    ops->clamp(TensorView::contiguous(v, DType::kF32, {1, 3}), 1.0f);
    EXPECT_TRUE(std::isnan(v[0]));
    EXPECT_EQ(v[1], 1.0f);
    EXPECT_EQ(v[2], -1.0f);
}

TEST(ModelOpsCpu, ArgmaxAndLogitsToHost) {
    auto ops = make_cpu_ops(1);
    const float nan = std::nanf("");
    std::vector<float> row = {1.0f, nan, 3.0f, -2.0f, 3.0f, nan};
    EXPECT_EQ(ops->argmax(TensorView::contiguous(row.data(), DType::kF32, {1, 6})), 2);  // first of the tie
    std::vector<float> all_nan = {nan, nan};
    EXPECT_EQ(ops->argmax(TensorView::contiguous(all_nan.data(), DType::kF32, {2})), 0);
    std::vector<uint16_t> bf = {f32_to_bf16(0.5f), f32_to_bf16(-1.0f), f32_to_bf16(7.0f)};
    const TensorView bv = TensorView::contiguous(bf.data(), DType::kBF16, {1, 3});
    EXPECT_EQ(ops->argmax(bv), 2);
    std::vector<float> host(3, nan);
    ops->logits_to_host(bv, host.data());
    EXPECT_EQ(host, (std::vector<float>{0.5f, -1.0f, 7.0f}));
    ops->synchronize();
    EXPECT_EQ(ops->device(), Device::kCPU);
    EXPECT_EQ(make_cpu_ops(3)->experts_options().num_threads, 3);
    EXPECT_THROW(make_cpu_ops(-1), Error);
}

TEST(ModelOpsCpu, RejectsBadArguments) {
    auto ops = make_cpu_ops(1);
    std::mt19937_64 rng(7);
    Mat x = random_mat(DType::kF32, 2, 8, rng), w = random_mat(DType::kF32, 3, 9, rng);
    Mat out = make_mat(DType::kF32, 2, 3);
    EXPECT_THROW(ops->linear(x.v, w.v, {}, out.v), Error);  // K mismatch
    EXPECT_THROW(ops->rms_norm(x.v, vec_view(random_mat(DType::kF32, 1, 3, rng)), 1e-6, x.v), Error);
    EXPECT_THROW(ops->qk_norm_rope(x.v, 1, 3, {}, {}, 1e-6, 0, make_rope_table(RopeConfig{}, 8)), Error);
    EXPECT_THROW(ops->qk_norm_rope(x.v, 3, 8, {}, {}, 1e-6, 0, make_rope_table(RopeConfig{}, 8)), Error);  // 1 head
    EXPECT_THROW(ops->add_rms_norm(x.v, out.v, x.v, vec_view(random_mat(DType::kF32, 1, 8, rng)), 1e-6, x.v),
                 Error);  // shapes differ
    Mat kc = make_mat(DType::kF32, 2, 8);
    const AttentionShape shape{1, 1, 8, 0, 0.35f};
    EXPECT_THROW(ops->attention(x.v, x.v, x.v, kc.v, kc.v, 1, shape, out.v), Error);  // cache too short
    Tensor ids(DType::kI32, {2, 9});
    EXPECT_THROW(ops->router_topk(x.v, 9, true, ids.view(), make_mat(DType::kF32, 2, 9).v), Error);
}

// Expected tables printed once by transformers 5.24 / torch 2.15 (Qwen3MoeRotaryEmbedding(Qwen3MoeConfig(head_dim=...,
// rope_parameters={...})).inv_freq and .attention_scaling, "%.9g"). Compared within 2 ulp: torch's vectorised powf
// is within 1 ulp, ours is correctly rounded (bit-identical on 8058 of 8100 values over 222 configs checked).
TEST(ModelOpsCpu, RopeTableMatchesTransformers) {
    struct Case {
        RopeConfig c;
        int64_t head_dim;
        float scaling;
        std::vector<float> inv;
    };
    auto cfg = [](std::string type, double theta, double factor) {
        RopeConfig c;
        c.type = std::move(type), c.theta = theta, c.factor = factor;
        return c;
    };
    RopeConfig yarn = cfg("yarn", 10000.0, 4.0);
    yarn.original_max_position_embeddings = 256;
    RopeConfig yarn2 = cfg("yarn", 1e6, 8.0);
    yarn2.original_max_position_embeddings = 512, yarn2.beta_fast = 16.0, yarn2.beta_slow = 2.0;
    yarn2.attention_factor = 0.75;
    RopeConfig llama3 = cfg("llama3", 10000.0, 8.0);
    llama3.original_max_position_embeddings = 64, llama3.low_freq_factor = 1.0, llama3.high_freq_factor = 4.0;
    RopeConfig partial = cfg("linear", 10000.0, 2.0);
    partial.partial_rotary_factor = 0.35;  // int(64 * 0.35) = 22
    const std::vector<float> base = {1.0f,           0.316227764f,   0.100000001f,   0.0316227786f,
                                     0.00999999978f, 0.00316227786f, 0.00100000005f, 0.000316227786f};
    const Case cases[] = {
        {cfg("default", 10000.0, 1.0), 16, 1.0f, base},
        {cfg("dynamic", 10000.0, 2.0), 16, 1.0f, base},
        {cfg("linear", 1e6, 4.0),
         16,
         1.0f,
         {0.25f, 0.0444569848f, 0.00790569466f, 0.00140585331f, 0.000250000012f, 4.44569851e-05f, 7.90569356e-06f,
          1.40585337e-06f}},
        {yarn,
         16,
         1.13862944f,
         {1.0f, 0.25693506f, 0.0625f, 0.0138349654f, 0.00249999994f, 0.000790569466f, 0.000250000012f,
          7.90569466e-05f}},
        {yarn2,
         16,
         0.75f,
         {1.0f, 0.125961453f, 0.0131761581f, 0.000702926656f, 0.000125000006f, 2.22284925e-05f, 3.95284678e-06f,
          7.02926684e-07f}},
        {llama3,
         16,
         1.0f,
         {1.0f, 0.244384587f, 0.0130422562f, 0.00395284733f, 0.00124999997f, 0.000395284733f, 0.000125000006f,
          3.95284733e-05f}},
        {partial,
         64,
         1.0f,
         {0.5f, 0.21643807f, 0.0936908647f, 0.0405565389f, 0.0175559558f, 0.00759955496f, 0.00328966556f,
          0.00142401806f, 0.000616423262f, 0.000266834977f, 0.00011550646f}},
    };
    for (const Case& c : cases) {
        const RopeTable t = make_rope_table(c.c, c.head_dim);
        EXPECT_EQ(t.rotary_dim, int64_t(2 * c.inv.size())) << c.c.type;
        EXPECT_FLOAT_EQ(t.attention_scaling, c.scaling) << c.c.type;
        ASSERT_EQ(t.inv_freq.size(), c.inv.size()) << c.c.type;
        for (size_t i = 0; i < c.inv.size(); ++i)
            EXPECT_NEAR(t.inv_freq[i], c.inv[i], 2.4e-7 * c.inv[i]) << c.c.type << " i " << i;
    }
    EXPECT_THROW(make_rope_table(cfg("longrope", 10000.0, 2.0), 16), Error);
    EXPECT_THROW(make_rope_table(cfg("yarn", 10000.0, 2.0), 16), Error);  // no original_max_position_embeddings
    RopeConfig odd;
    odd.partial_rotary_factor = 0.3;  // int(16 * 0.3) = 4 is fine; 10 * 0.3 = 3 is odd
    EXPECT_EQ(make_rope_table(odd, 16).rotary_dim, 4);
    EXPECT_THROW(make_rope_table(odd, 10), Error);
}

}  // namespace
}  // namespace moex::model
