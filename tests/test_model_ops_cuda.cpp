// The CUDA model ops (src/model/ops/cuda_ops.cpp) against float64 host references written here: embed, rms_norm, the
// fused q/k norm + rotary embedding, linear (GEMV and cuBLASLt), the elementwise ops, router top-k, argmax and the
// logits copy, in f32 and bf16, on fresh random data with poisoned outputs. Attention: test_model_ops_cuda_attention.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cuda/model/model_ops.h"
#include "tests/model_ops_cuda_support.h"

namespace moex::test::model_ops {
namespace {

TEST(ModelOpsCudaBuild, WithoutCudaTheFactoryRefuses) {
#if MOEX_WITH_CUDA
    GTEST_SKIP() << "this build has CUDA";
#else
    try {
        (void)model::make_cuda_ops(0, nullptr);
        FAIL() << "make_cuda_ops did not throw";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
        EXPECT_NE(std::string(e.what()).find("no CUDA support"), std::string::npos);
    }
#endif
}

TEST(ModelOpsCudaChoice, KernelChoiceFollowsShapeAndAlignment) {
    namespace cm = cuda::model;
    auto* p = reinterpret_cast<void*>(uintptr_t(1) << 20);  // 16-byte aligned, never dereferenced
    cm::LinearArgs l{p, p, nullptr, p, 1, 151936, 2048, 2048, 151936, DType::kBF16, true};
    EXPECT_EQ(cm::choose_linear_kernel(l), cm::LinearKernel::kGemv);
    l.T = 5;
    EXPECT_EQ(cm::choose_linear_kernel(l), cm::LinearKernel::kCublasLt);
    l.T = 1, l.K = 2047;
    EXPECT_EQ(cm::choose_linear_kernel(l), cm::LinearKernel::kCublasLt);
    // qwen3-30b-a3b: 32 q heads, 4 kv heads, head_dim 128, q/k/v views into the fused qkv row of 5120.
    cm::AttentionArgs a{p, p, p, p, p, p, 5120, 5120, 5120, 4096, 1, 100, 4096, 32, 4, 128, 0, 0.088f, DType::kBF16};
    EXPECT_EQ(cm::choose_attention_kernel(a), cm::AttentionKernel::kDecode);
    a.T = 2;
    EXPECT_EQ(cm::choose_attention_kernel(a), cm::AttentionKernel::kDecode);
    a.T = 3;  // 24 query rows per kv head
    EXPECT_EQ(cm::choose_attention_kernel(a), cm::AttentionKernel::kFlash);
    a.dtype = DType::kF32;
    EXPECT_EQ(cm::choose_attention_kernel(a), cm::AttentionKernel::kGeneric);
    a.T = 1, a.D = 96;
    EXPECT_EQ(cm::choose_attention_kernel(a), cm::AttentionKernel::kGeneric);
}

TEST(ModelOpsCudaChoice, DecodeSplitsCoverTheKeysWithAboutOneCtaPerSm) {
    namespace cm = cuda::model;
    const auto qwen3 = cm::choose_decode_split(4096, 4, 132, 64, 128);  // 4 kv heads, 4096-row cache, H200
    EXPECT_EQ(qwen3.splits, 32);
    EXPECT_EQ(qwen3.keys_per_split, 128);
    EXPECT_EQ(cm::choose_decode_split(50, 4, 132, 64, 128).splits, 1);
    for (const int64_t keys : {1, 63, 64, 65, 1000, 4097, 20001, 131072})
        for (const int64_t nkv : {1, 4, 8, 32}) {
            const auto s = cm::choose_decode_split(keys, nkv, 132, 64, 128);
            EXPECT_GE(s.splits * s.keys_per_split, keys);
            EXPECT_LT((s.splits - 1) * s.keys_per_split, keys);  // no empty split
            EXPECT_LE(s.splits, 128);
            EXPECT_LE(s.splits * nkv, std::max<int64_t>(132 + nkv, nkv));
            EXPECT_EQ(s.keys_per_split % 64, 0);
        }
}

class ModelOpsCudaOps : public ::testing::TestWithParam<DType> {
   protected:
    void SetUp() override {
        MOEX_SKIP_WITHOUT_CUDA();
        ops_ = cuda_ops();
    }
    DType dt() const { return GetParam(); }
    std::unique_ptr<model::Ops> ops_;
    std::mt19937_64 rng_ = fresh_rng();
};

TEST_P(ModelOpsCudaOps, EmbedGathersRows) {
    for (const auto& [T, H] : {std::pair<int64_t, int64_t>{5, 72}, {200, 20}}) {  // inline ids; ids copied; 4-byte rows
        const Mat table = random_mat(37, H, dt(), rng_);
        std::vector<int32_t> ids(static_cast<size_t>(T));
        for (auto& id : ids) id = int32_t(rng_() % 37);
        const Mat out = poisoned(T, H, dt());
        ops_->embed(ids.data(), T, table.view(), out.view());
        ops_->synchronize();
        std::vector<double> ref;
        for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h) ref.push_back(table.at(ids[size_t(t)], h));
        EXPECT_EQ(out.read(), ref) << "T=" << T;
    }
    std::vector<int32_t> bad{0, 37};
    const Mat table = random_mat(37, 8, dt(), rng_);
    const Mat out = poisoned(2, 8, dt());
    EXPECT_THROW(ops_->embed(bad.data(), 2, table.view(), out.view()), Error);
}

// y = round(w * round(x * rsqrt(mean(x^2) + eps))) over groups of G columns.
std::vector<double> rms_ref(const Mat& x, int64_t c0, int64_t W, const Mat& w, double eps, std::vector<double> base) {
    const int64_t G = w.cols;
    for (int64_t t = 0; t < x.rows; ++t)
        for (int64_t g = c0; g < c0 + W; g += G) {
            double ss = 0;
            for (int64_t c = 0; c < G; ++c) ss += x.at(t, g + c) * x.at(t, g + c);
            const double r = 1.0 / std::sqrt(ss / double(G) + eps);
            for (int64_t c = 0; c < G; ++c)
                base[size_t(t * x.cols + g + c)] =
                    round_to(w.at(0, c) * round_to(x.at(t, g + c) * r, x.dtype), x.dtype);
        }
    return base;
}

TEST_P(ModelOpsCudaOps, RmsNormOverRowsAndGroups) {
    for (const auto& [T, H, G] :
         {std::tuple<int64_t, int64_t, int64_t>{3, 2048, 2048}, {4, 100, 100}, {2, 1536, 768}}) {
        const Mat x = random_mat(T, H, dt(), rng_, 3.0), w = random_mat(1, G, dt(), rng_);
        const Mat out = poisoned(T, H, dt());
        ops_->rms_norm(x.view(), w.vec(), 1e-6, out.view());
        ops_->synchronize();
        EXPECT_TRUE(close_to(out, rms_ref(x, 0, H, w, 1e-6, std::vector<double>(size_t(T * H))))) << H << "/" << G;
    }
}

// The residual add and the norm of its sum in one launch, as a decoder layer ends twice.
TEST_P(ModelOpsCudaOps, AddRmsNorm) {
    for (const int64_t W : {2048, 136, 100}) {
        const int64_t T = 3;
        const Mat h = random_mat(T, W, dt(), rng_), o = random_mat(T, W, dt(), rng_), w = random_mat(1, W, dt(), rng_);
        const Mat x = poisoned(T, W, dt());
        ops_->add_rms_norm(h.view(), o.view(), h.view(), w.vec(), 1e-6, x.view());
        ops_->synchronize();
        std::vector<double> sum(h.host.size());
        for (size_t i = 0; i < sum.size(); ++i) sum[i] = round_to(h.host[i] + o.host[i], dt());
        EXPECT_EQ(h.read(), sum) << "W=" << W;
        const Mat s = mat_from(T, W, dt(), sum);
        EXPECT_TRUE(close_to(x, rms_ref(s, 0, W, w, 1e-6, std::vector<double>(sum.size())))) << "W=" << W;
    }
}

// Reference rotary embedding of heads [h0, h1) of rows of `v` (values after any norm), transformers' convention.
void rope_ref(std::vector<double>& v, int64_t cols, int64_t T, int64_t h0, int64_t h1, int64_t D, int64_t pos0,
              const model::RopeTable& rope, DType dt) {
    const int64_t half = rope.rotary_dim / 2;
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = h0; h < h1; ++h) {
            double* x = v.data() + t * cols + h * D;
            const std::vector<double> in(x, x + D);
            for (int64_t i = 0; i < half; ++i) {
                const float ang = float(pos0 + t) * rope.inv_freq[size_t(i)];
                const double c = round_to(double(float(std::cos(double(ang)))) * rope.attention_scaling, dt);
                const double s = round_to(double(float(std::sin(double(ang)))) * rope.attention_scaling, dt);
                x[i] = round_to(round_to(in[i] * c, dt) - round_to(in[i + half] * s, dt), dt);
                x[i + half] = round_to(round_to(in[i + half] * c, dt) + round_to(in[i] * s, dt), dt);
            }
            for (int64_t d = 0; d < D; ++d)
                if (d >= rope.rotary_dim) x[d] = round_to(in[d], dt);
        }
}

model::RopeTable table_for(int64_t rotary_dim, double theta, float scaling) {
    model::RopeTable r;
    r.rotary_dim = rotary_dim, r.attention_scaling = scaling;
    for (int64_t i = 0; i < rotary_dim / 2; ++i)
        r.inv_freq.push_back(float(1.0 / std::pow(theta, double(2 * i) / double(rotary_dim))));
    return r;
}

// Qwen3's attention input: per-head q_norm and k_norm in place on the fused qkv rows, then rope of q and k heads,
// one launch. v must come through untouched.
TEST_P(ModelOpsCudaOps, QkNormRopeOnFusedRows) {
    const int64_t T = 5, nq = 4, nkv = 2, D = 64, W = (nq + 2 * nkv) * D, pos0 = 11;
    const Mat qkv = random_mat(T, W, dt(), rng_, 2.0);
    const Mat qw = random_mat(1, D, dt(), rng_), kw = random_mat(1, D, dt(), rng_);
    const auto rope = table_for(D, 1e6, 1.0f);
    ops_->qk_norm_rope(qkv.block(0, (nq + nkv) * D), nq, D, qw.vec(), kw.vec(), 1e-6, pos0, rope);
    ops_->synchronize();
    std::vector<double> ref = rms_ref(qkv, 0, nq * D, qw, 1e-6, qkv.host);
    ref = rms_ref(qkv, nq * D, nkv * D, kw, 1e-6, ref);
    rope_ref(ref, W, T, 0, nq + nkv, D, pos0, rope, dt());
    EXPECT_TRUE(close_to(qkv, ref));
}

// An in-place per-head norm on its own; partial rotary with attention scaling and no norms.
TEST_P(ModelOpsCudaOps, HeadNormAloneAndPartialRope) {
    const int64_t T = 3, heads = 6, D = 64;
    const Mat x = random_mat(T, heads * D, dt(), rng_), w = random_mat(1, D, dt(), rng_);
    ops_->rms_norm(x.view(), w.vec(), 1e-5, x.view());
    ops_->synchronize();
    std::vector<double> ref = rms_ref(x, 0, heads * D, w, 1e-5, x.host);
    EXPECT_TRUE(close_to(x, ref));

    const Mat y = random_mat(T, heads * D, dt(), rng_);
    const auto rope = table_for(32, 1e4, 1.25f);
    ops_->qk_norm_rope(y.view(), heads, D, {}, {}, 1e-6, 3000, rope);
    ops_->synchronize();
    ref = y.host;
    rope_ref(ref, heads * D, T, 0, heads, D, 3000, rope, dt());
    EXPECT_TRUE(close_to(y, ref));
}

TEST_P(ModelOpsCudaOps, LinearGemvAndCublas) {
    struct Case {
        int64_t T, N, K, pad;
        bool bias, out_f32;
    };
    for (const Case c :
         {Case{1, 300, 256, 0, false, false}, Case{1, 301, 264, 8, true, true}, Case{3, 70, 128, 0, true, false},
          Case{37, 96, 160, 16, true, false}, Case{64, 130, 200, 0, false, true}, Case{1, 40, 30, 0, true, false},
          Case{1, 20000, 2048, 0, false, true}}) {  // an lm_head row block: f32 logits
        const DType odt = c.out_f32 ? DType::kF32 : dt();
        const Mat xs = random_mat(c.T, c.K + c.pad, dt(), rng_);
        const Mat w = random_mat(c.N, c.K, dt(), rng_, 1.0 / std::sqrt(double(c.K)));
        const Mat b = random_mat(1, c.N, dt(), rng_, 0.5);
        const Mat out = poisoned(c.T, c.N, odt);
        ops_->linear(xs.block(0, c.K), w.view(), c.bias ? b.vec() : TensorView{}, out.view());
        ops_->synchronize();
        std::vector<double> ref(size_t(c.T * c.N));
        for (int64_t t = 0; t < c.T; ++t)
            for (int64_t n = 0; n < c.N; ++n) {
                double s = c.bias ? b.at(0, n) : 0.0;
                for (int64_t k = 0; k < c.K; ++k) s += xs.at(t, k) * w.at(n, k);
                ref[size_t(t * c.N + n)] = s;
            }
        EXPECT_TRUE(close_to(out, ref)) << "T=" << c.T << " N=" << c.N << " K=" << c.K;
    }
}

TEST_P(ModelOpsCudaOps, ElementwiseOps) {
    for (const int64_t W : {40, 13}) {  // 16-byte vectors; scalar
        const int64_t T = 3;
        const Mat a = random_mat(T, W, dt(), rng_), b = random_mat(T, W, dt(), rng_);
        Mat out = poisoned(T, W, dt()), normed = poisoned(T, W, dt());
        const Mat w = random_mat(1, W, dt(), rng_);
        ops_->add_rms_norm(a.view(), b.view(), out.view(), w.vec(), 1e-6, normed.view());
        ops_->synchronize();
        std::vector<double> ref(size_t(T * W));
        for (size_t i = 0; i < ref.size(); ++i) ref[i] = round_to(a.host[i] + b.host[i], dt());
        EXPECT_TRUE(close_to(out, ref)) << "add W=" << W;

        const Mat c = random_mat(T, W, dt(), rng_, 2.0);
        ops_->clamp(c.view(), 0.75f);
        ops_->synchronize();
        for (size_t i = 0; i < ref.size(); ++i) ref[i] = std::clamp(c.host[i], -0.75, 0.75);
        EXPECT_EQ(c.read(), ref) << "clamp W=" << W;

        const Mat gu = random_mat(T, 2 * W, dt(), rng_, 2.0);
        for (const Activation act : {Activation::kSilu, Activation::kGelu, Activation::kGeluTanh, Activation::kRelu}) {
            out = poisoned(T, W, dt());
            ops_->gated_act(gu.view(), act, out.view());
            ops_->synchronize();
            for (int64_t t = 0; t < T; ++t)
                for (int64_t i = 0; i < W; ++i) {
                    const double g = gu.at(t, i), u = gu.at(t, W + i);
                    const double f = act == Activation::kSilu   ? g / (1 + std::exp(-g))
                                     : act == Activation::kGelu ? 0.5 * g * (1 + std::erf(g / std::sqrt(2.0)))
                                     : act == Activation::kRelu
                                         ? std::max(g, 0.0)
                                         : 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
                    ref[size_t(t * W + i)] = round_to(f, dt()) * u;  // act(gate) is a tensor of its own
                }
            EXPECT_TRUE(close_to(out, ref)) << "gated_act " << int(act) << " W=" << W;
        }

        const Mat gate = random_mat(T, 1, dt(), rng_), acc = random_mat(T, W, dt(), rng_);
        ops_->sigmoid_gate_add(gate.view(), a.view(), acc.view());
        ops_->synchronize();
        for (int64_t t = 0; t < T; ++t)
            for (int64_t i = 0; i < W; ++i)
                ref[size_t(t * W + i)] =
                    acc.at(t, i) + round_to(a.at(t, i) * round_to(1 / (1 + std::exp(-gate.at(t, 0))), dt()), dt());
        EXPECT_TRUE(close_to(acc, ref)) << "sigmoid_gate_add W=" << W;
    }
}

TEST_P(ModelOpsCudaOps, RouterTopkSoftmaxTiesToLowerIndex) {
    const int64_t T = 6, E = 40, k = 5;
    std::vector<double> logits(size_t(T * E));
    std::normal_distribution<double> nd(0.0, 2.0);
    for (auto& v : logits) v = nd(rng_);
    for (int64_t e = 0; e < E; ++e) logits[size_t(e)] = 0.5;  // row 0: all equal
    logits[size_t(E + 7)] = logits[size_t(E + 3)] = 9.0;      // row 1: a tie at the top
    const Mat lg = mat_from(T, E, dt(), logits);
    for (const bool normalize : {false, true}) {
        const Mat ids = poisoned(T, k, DType::kI32), w = poisoned(T, k, dt());
        ops_->router_topk(lg.view(), k, normalize, ids.view(), w.view());
        ops_->synchronize();
        std::vector<double> ref_ids, ref_w;
        for (int64_t t = 0; t < T; ++t) {
            double mx = -INFINITY, sum = 0;
            for (int64_t e = 0; e < E; ++e) mx = std::max(mx, lg.at(t, e));
            std::vector<double> p(static_cast<size_t>(E));
            for (int64_t e = 0; e < E; ++e) sum += (p[size_t(e)] = std::exp(lg.at(t, e) - mx));
            std::vector<int64_t> order(static_cast<size_t>(E));
            std::iota(order.begin(), order.end(), 0);
            std::stable_sort(order.begin(), order.end(),
                             [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
            double picked = 0;
            for (int64_t j = 0; j < k; ++j) picked += p[size_t(order[size_t(j)])] / sum;
            for (int64_t j = 0; j < k; ++j) {
                ref_ids.push_back(double(order[size_t(j)]));
                ref_w.push_back(p[size_t(order[size_t(j)])] / sum / (normalize ? picked : 1.0));
            }
        }
        EXPECT_EQ(ids.read(), ref_ids) << "normalize=" << normalize;
        EXPECT_TRUE(close_to(w, ref_w)) << "normalize=" << normalize;
    }
}

TEST_P(ModelOpsCudaOps, ArgmaxAndLogitsCopy) {
    const int64_t V = 151936;
    std::vector<double> v(static_cast<size_t>(V));
    std::normal_distribution<double> nd(0.0, 3.0);
    for (auto& x : v) x = nd(rng_);
    const int64_t hi = int64_t(rng_() % uint64_t(V - 1000)) + 500;
    v[size_t(hi)] = v[size_t(hi + 300)] = 40.0;  // a tie: the lower index wins
    v[size_t(hi - 7)] = std::nan("");            // NaN never wins
    const Mat row = mat_from(1, V, dt(), v);
    EXPECT_EQ(ops_->argmax(row.vec()), hi);
    const Mat nan_row = mat_from(1, 100, dt(), std::vector<double>(100, std::nan("")));
    EXPECT_EQ(ops_->argmax(nan_row.vec()), 0);
    const Mat ninf = mat_from(1, 100, dt(), std::vector<double>(100, -INFINITY));
    EXPECT_EQ(ops_->argmax(ninf.vec()), 0);
    if (dt() == DType::kF32) {
        std::vector<float> host(static_cast<size_t>(V));
        ops_->logits_to_host(row.vec(), host.data());
        for (int64_t i = 0; i < V; ++i)
            if (!std::isnan(row.host[size_t(i)])) {
                ASSERT_EQ(double(host[size_t(i)]), row.host[size_t(i)]) << i;
            }
    }
}

INSTANTIATE_TEST_SUITE_P(ModelOpsCuda, ModelOpsCudaOps, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return info.param == DType::kF32 ? "f32" : "bf16"; });

}  // namespace
}  // namespace moex::test::model_ops
