// CUDA attention (src/model/ops/cuda_ops.cpp -> cuda/model/attention*.cu) against a float64 reference: the split-K
// decode kernel (one and many splits, several head sizes, sliding window), the bf16 flash kernel and the generic kernel
// (fresh and chunked prefill), the qwen3-30b-a3b head layout; the cache rows written, and nothing past them read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "tests/model_ops_cuda_support.h"

namespace moex::test::model_ops {
namespace {

struct AttnCase {
    const char* name;
    int64_t T, pos0, max_len, nq, nkv, D, window;
};

const AttnCase kCases[] = {
    {"decode_d64", 1, 37, 64, 8, 2, 64, 0},
    {"decode_splits_d128", 1, 1000, 1024, 8, 1, 128, 0},
    {"decode_t2_window", 2, 300, 400, 8, 2, 128, 100},
    {"decode_d256", 1, 70, 128, 2, 1, 256, 0},
    {"prefill", 150, 0, 160, 4, 2, 128, 0},
    {"prefill_chunked_window", 70, 77, 200, 4, 1, 128, 50},
    {"generic_d32", 9, 5, 16, 4, 4, 32, 0},
    {"qwen3_decode", 1, 4000, 4096, 32, 4, 128, 0},
    {"qwen3_decode_long", 1, 20000, 20001, 32, 4, 128, 0},
    {"qwen3_prefill", 256, 0, 256, 32, 4, 128, 0},
};

void PrintTo(const AttnCase& c, std::ostream* os) { *os << c.name; }

class ModelOpsCudaAttention : public ::testing::TestWithParam<std::tuple<DType, AttnCase>> {};

// out[t, h*D + d] = sum_j softmax_j(scale * q·K[j]) V[j][d] over keys [lo, pos0 + t]; K[j] is the cache below pos0,
// the new rows from there on.
// magnitude (optional) receives sum_j p_j |V[j][d]| per output: the scale of the rounding error of P.
std::vector<double> attention_ref(const AttnCase& c, const Mat& qkv, const Mat& kc, const Mat& vc,
                                  std::vector<double>* magnitude = nullptr) {
    const int64_t D = c.D, G = c.nq / c.nkv, koff = c.nq * D, voff = (c.nq + c.nkv) * D;
    const double scale = 1.0 / std::sqrt(double(D));
    auto key = [&](int64_t j, int64_t kvh, int64_t d) {
        return j < c.pos0 ? kc.at(j, kvh * D + d) : qkv.at(j - c.pos0, koff + kvh * D + d);
    };
    auto val = [&](int64_t j, int64_t kvh, int64_t d) {
        return j < c.pos0 ? vc.at(j, kvh * D + d) : qkv.at(j - c.pos0, voff + kvh * D + d);
    };
    std::vector<double> out(size_t(c.T * c.nq * D));
    if (magnitude) magnitude->assign(out.size(), 0.0);
    for (int64_t t = 0; t < c.T; ++t)
        for (int64_t h = 0; h < c.nq; ++h) {
            const int64_t pos = c.pos0 + t, lo = c.window > 0 ? std::max<int64_t>(0, pos - c.window + 1) : 0;
            const int64_t kvh = h / G;
            std::vector<double> s(size_t(pos - lo + 1));
            double mx = -INFINITY, sum = 0;
            for (int64_t j = lo; j <= pos; ++j) {
                double dot = 0;
                for (int64_t d = 0; d < D; ++d) dot += qkv.at(t, h * D + d) * key(j, kvh, d);
                s[size_t(j - lo)] = dot * scale;
                mx = std::max(mx, dot * scale);
            }
            for (double& x : s) sum += (x = std::exp(x - mx));
            for (int64_t d = 0; d < D; ++d) {
                double o = 0, mag = 0;
                for (int64_t j = lo; j <= pos; ++j) {
                    o += s[size_t(j - lo)] * val(j, kvh, d);
                    mag += s[size_t(j - lo)] * std::fabs(val(j, kvh, d));
                }
                out[size_t(t * c.nq * D + h * D + d)] = o / sum;
                if (magnitude) (*magnitude)[size_t(t * c.nq * D + h * D + d)] = mag / sum;
            }
        }
    return out;
}

// Cache rows [0, pos0) hold random history; rows from pos0 on hold NaN, so a kernel that reads a row it should not
// (or forgets to write one) poisons its output.
Mat history_cache(const AttnCase& c, DType dt, std::mt19937_64& rng) {
    std::normal_distribution<double> nd(0.0, 1.0);
    std::vector<double> v(size_t(c.max_len * c.nkv * c.D), std::nan(""));
    for (int64_t i = 0; i < c.pos0 * c.nkv * c.D; ++i) v[size_t(i)] = nd(rng);
    return mat_from(c.max_len, c.nkv * c.D, dt, v);
}

TEST_P(ModelOpsCudaAttention, MatchesReferenceAndWritesTheCache) {
    MOEX_SKIP_WITHOUT_CUDA();
    const auto [dt, c] = GetParam();
    auto rng = fresh_rng();
    auto ops = cuda_ops();
    const int64_t D = c.D, W = (c.nq + 2 * c.nkv) * D;
    const Mat qkv = random_mat(c.T, W, dt, rng);
    const Mat kc = history_cache(c, dt, rng), vc = history_cache(c, dt, rng);
    const model::AttentionShape shape{c.nq, c.nkv, D, c.window, float(1.0 / std::sqrt(double(D)))};
    std::vector<double> magnitude;
    const std::vector<double> ref = attention_ref(c, qkv, kc, vc, &magnitude);
    // Twice: the second launch checks that the decode kernel's arrival counters were reset by the first.
    for (int rep = 0; rep < 2; ++rep) {
        const Mat out = poisoned(c.T, c.nq * D, dt);
        ops->attention(qkv.block(0, c.nq * D), qkv.block(c.nq * D, c.nkv * D), qkv.block((c.nq + c.nkv) * D, c.nkv * D),
                       kc.view(), vc.view(), c.pos0, shape, out.view());
        ops->synchronize();
        if (dt == DType::kBF16) {
            // bf16 flash attention rounds P to bf16 before P·V (as FlashAttention does): each term carries up to
            // 2^-8 relative error, so the bound scales with sum_j p_j |v_j| (large under cancellation), plus one
            // rounding of the output.
            const Tensor t = out.download();
            int64_t bad = 0;
            double worst = 0;
            for (int64_t i = 0; i < int64_t(ref.size()); ++i) {
                const double got = bf16_to_f32(t.view().ptr<uint16_t>()[i]), want = ref[size_t(i)];
                const double err = std::fabs(got - want), bound = 8e-3 * magnitude[size_t(i)] + 4e-3 * std::fabs(want);
                worst = std::max(worst, err / bound);
                if (!(err <= bound)) ++bad;
            }
            EXPECT_EQ(bad, 0) << c.name << " run " << rep << ": values beyond the bf16 flash bound (worst " << worst
                              << "x the bound)";
        } else {
            EXPECT_TRUE(close_to(out, ref)) << c.name << " run " << rep;
        }
    }
    const std::vector<double> kgot = kc.read(), vgot = vc.read();
    int64_t wrong = 0;
    for (int64_t j = 0; j < c.max_len; ++j)
        for (int64_t i = 0; i < c.nkv * D; ++i) {
            const size_t at = size_t(j * c.nkv * D + i);
            const bool fresh = j >= c.pos0 && j < c.pos0 + c.T;
            const double kw = fresh ? qkv.at(j - c.pos0, c.nq * D + i) : kc.host[at];
            const double vw = fresh ? qkv.at(j - c.pos0, (c.nq + c.nkv) * D + i) : vc.host[at];
            const auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
            wrong += !same(kgot[at], kw) + !same(vgot[at], vw);
        }
    EXPECT_EQ(wrong, 0) << c.name << ": cache values differ from history + new rows";
}

// A captured decode step reads its position from device memory: the decode kernel then derives the key range and
// the split count itself (its grid holds the most splits) and must give the bits of the host-position launch, at
// positions of one split and of many, with a sliding window, and with the cache written the same.
TEST(ModelOpsCudaAttentionDevicePosition, GivesTheHostPositionsBits) {
    MOEX_SKIP_WITHOUT_CUDA();
    auto ops = cuda_ops();
    const uint64_t seed = std::random_device{}();
    RecordProperty("seed", std::to_string(seed));
    const AttnCase cases[] = {
        {"short", 1, 5, 4096, 32, 4, 128, 0},          {"two_chunks", 1, 100, 4096, 32, 4, 128, 0},
        {"many_splits", 1, 3000, 4096, 32, 4, 128, 0}, {"window", 2, 700, 1024, 8, 2, 64, 256},
        {"d256", 1, 333, 400, 4, 1, 256, 0},
    };
    for (DType dt : {DType::kBF16, DType::kF32})
        for (const AttnCase& c : cases) {
            std::mt19937_64 rng(seed);
            const int64_t D = c.D, W = (c.nq + 2 * c.nkv) * D;
            const Mat qkv = random_mat(c.T, W, dt, rng);
            std::mt19937_64 cache_rng = rng;
            const Mat kc_host = history_cache(c, dt, cache_rng), vc_host = history_cache(c, dt, cache_rng);
            cache_rng = rng;
            const Mat kc_dev = history_cache(c, dt, cache_rng), vc_dev = history_cache(c, dt, cache_rng);
            const model::AttentionShape shape{c.nq, c.nkv, D, c.window, float(1.0 / std::sqrt(double(D)))};
            const int64_t one = 1;
            const DeviceTensor pos(DType::kI64, &one, 1, Device::kCUDA);
            ops->upload(pos.view(), &c.pos0);
            const Mat out_host = poisoned(c.T, c.nq * D, dt), out_dev = poisoned(c.T, c.nq * D, dt);
            const auto run = [&](const Mat& kc, const Mat& vc, const model::Position& p, const Mat& out) {
                ops->attention(qkv.block(0, c.nq * D), qkv.block(c.nq * D, c.nkv * D),
                               qkv.block((c.nq + c.nkv) * D, c.nkv * D), kc.view(), vc.view(), p, shape, out.view());
            };
            run(kc_host, vc_host, c.pos0, out_host);
            for (int rep = 0; rep < 2; ++rep)  // twice: the idle CTAs must leave the arrival counters right
                run(kc_dev, vc_dev, model::Position(c.pos0, pos.view().ptr<int64_t>()), out_dev);
            ops->synchronize();
            const auto same_bits = [](const Mat& x, const Mat& y) {
                const Tensor a = x.download(), b = y.download();
                return std::memcmp(a.view().data, b.view().data, size_t(a.view().nbytes())) == 0;
            };
            EXPECT_TRUE(same_bits(out_host, out_dev))
                << dtype_name(dt) << " " << c.name << ": the device position changed the output bits";
            EXPECT_TRUE(same_bits(kc_host, kc_dev) && same_bits(vc_host, vc_dev))
                << dtype_name(dt) << " " << c.name << ": the caches differ";
        }
}

TEST(ModelOpsCudaAttentionDevicePosition, OtherKernelsRefuseIt) {
    MOEX_SKIP_WITHOUT_CUDA();
    auto rng = fresh_rng();
    auto ops = cuda_ops();
    const Mat qkv = random_mat(2, 3 * 32, DType::kF32, rng), kc = random_mat(8, 32, DType::kF32, rng);
    const Mat out = poisoned(2, 32, DType::kF32);
    const int64_t one = 1;
    const DeviceTensor pos(DType::kI64, &one, 1, Device::kCUDA);
    const model::AttentionShape shape{1, 1, 32, 0, 0.125f};  // head_dim 32: the generic kernel
    test::expect_error(
        [&] {
            ops->attention(qkv.block(0, 32), qkv.block(32, 32), qkv.block(64, 32), kc.view(), kc.view(),
                           model::Position(3, pos.view().ptr<int64_t>()), shape, out.view());
        },
        ErrorCode::kUnsupported, "decode kernel");
}

TEST(ModelOpsCudaAttentionErrors, RejectsRowsPastTheCache) {
    MOEX_SKIP_WITHOUT_CUDA();
    auto rng = fresh_rng();
    auto ops = cuda_ops();
    const Mat qkv = random_mat(4, 3 * 64, DType::kF32, rng), kc = random_mat(8, 64, DType::kF32, rng);
    const Mat out = poisoned(4, 64, DType::kF32);
    const model::AttentionShape shape{1, 1, 64, 0, 0.125f};
    try {
        ops->attention(qkv.block(0, 64), qkv.block(64, 64), qkv.block(128, 64), kc.view(), kc.view(), 6, shape,
                       out.view());
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    }
}

INSTANTIATE_TEST_SUITE_P(ModelOpsCuda, ModelOpsCudaAttention,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16), ::testing::ValuesIn(kCases)),
                         [](const auto& info) {
                             return std::string(std::get<0>(info.param) == DType::kF32 ? "f32_" : "bf16_") +
                                    std::get<1>(info.param).name;
                         });

}  // namespace
}  // namespace moex::test::model_ops
