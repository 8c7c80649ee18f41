// Every registered backend on every device against the float64 reference, over the shape table and a covering set
// of dtypes and layout variants; plus self-checks of the reference itself (hand-computed values, layouts agree).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "moex/error.h"
#include "tests/test_support.h"

namespace moex::test {
namespace {

// ---- the case list -----------------------------------------------------------------------------------------
struct Case {
    int shape;  // index into shapes::kTestShapes
    int64_t T;
    Variant variant;
    uint64_t seed;
};

// Six gate modes x three dtypes = 18 cases. Five on/off layout choices come from a 6-row table rotated by the dtype,
// chosen so that the 18 cases cover every PAIR of values of the seven factors (dtype, gate mode, interleaved,
// transposed, bias, int64 ids, weights in the activation dtype) — except interleaved x ungated, which is invalid.
// So within each dtype every gate mode and every layout value appears (bf16-only backends see them all).
// Shapes and T cycle independently.
std::vector<Case> make_cases() {
    //                         interleaved transposed bias ids_i64 weights_in_act_dtype
    static const bool kBits[6][5] = {{0, 0, 0, 0, 0}, {0, 0, 1, 1, 1}, {1, 1, 0, 0, 0},
                                     {0, 1, 0, 1, 1}, {1, 0, 1, 0, 1}, {1, 1, 1, 1, 0}};
    static const DType kDtypes[3] = {DType::kF32, DType::kBF16, DType::kF16};
    static const Activation kActs[4] = {Activation::kSilu, Activation::kGelu, Activation::kGeluTanh, Activation::kRelu};
    static const int64_t kTokens[7] = {1, 2, 9, 17, 33, 64, 100};
    std::vector<Case> cases;
    for (int d = 0; d < 3; ++d) {
        for (int g = 0; g < 6; ++g) {
            const int c = d * 6 + g;
            const bool* b = kBits[(g + d) % 6];
            Variant v;
            v.dtype = kDtypes[d];
            v.activation = g < 4 ? kActs[g] : kActs[(3 + d) % 4];  // ungated: relu, silu, gelu
            v.gate = g == 4 ? GateKind::kGptOss : GateKind::kDefault;
            v.has_gate = g != 5;
            v.concatenated = !b[0] || !v.has_gate;
            v.transposed = b[1];
            v.bias = b[2];
            v.ids_i64 = b[3];
            v.weights_f32 = !b[4];
            cases.push_back({c % int(shapes::kTestShapes.size()), kTokens[(c * 5) % 7], v, uint64_t(1000 + c)});
        }
    }
    return cases;
}

std::string case_name(const Case& c) {
    return gtest_safe(std::string(shapes::kTestShapes[size_t(c.shape)].name)) + "_" +
           std::to_string(shapes::kTestShapes[size_t(c.shape)].factor) + "_T" + std::to_string(c.T) + "_" +
           c.variant.name();
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

// ---- every backend x device x case vs the reference -----------------------------------------------------------
class BackendsMatchReference : public ::testing::TestWithParam<std::tuple<BackendOnDevice, Case>> {};

TEST_P(BackendsMatchReference, Case) {
    const auto& [bd, c] = GetParam();
    const Backend& backend = ExpertsInterface::global().get(bd.backend);
    const HostProblem hp(shapes::kTestShapes[size_t(c.shape)], c.T, c.variant, c.seed);
    ASSERT_NO_THROW(hp.problem().validate());
    const PlacedProblem placed = place(hp.problem(), bd.device);
    MOEX_SKIP_IF_REFUSED(backend, placed);
    const Tensor out = run_backend(backend, placed);
    EXPECT_TRUE(outputs_close(out.view(), reference_of(hp.problem())))
        << bd.backend << " on " << device_name(bd.device) << ", " << case_name(c);
}

INSTANTIATE_TEST_SUITE_P(All, BackendsMatchReference,
                         ::testing::Combine(::testing::ValuesIn(backends_on_devices()),
                                            ::testing::ValuesIn(make_cases())),
                         [](const auto& info) {
                             return param_name(std::get<0>(info.param)) + "_" + case_name(std::get<1>(info.param));
                         });

// The case list is the coverage promise: every pair of values of the seven factors, and every shape.
TEST(CaseList, CoversEveryPairOfVariants) {
    const auto cases = make_cases();
    const auto factors = [](const Variant& v) {
        const int gate_mode = !v.has_gate ? 5 : v.gate == GateKind::kGptOss ? 4 : int(v.activation);
        const int dtype = v.dtype == DType::kF32 ? 0 : v.dtype == DType::kBF16 ? 1 : 2;
        return std::array<int, 7>{dtype, gate_mode, !v.concatenated, v.transposed, v.bias, v.ids_i64, !v.weights_f32};
    };
    const int levels[7] = {3, 6, 2, 2, 2, 2, 2};
    for (int i = 0; i < 7; ++i)
        for (int j = i + 1; j < 7; ++j)
            for (int a = 0; a < levels[i]; ++a)
                for (int b = 0; b < levels[j]; ++b) {
                    if (i == 1 && a == 5 && j == 2 && b == 1) continue;  // ungated + interleaved is invalid
                    const bool seen = std::any_of(cases.begin(), cases.end(), [&](const Case& c) {
                        const auto f = factors(c.variant);
                        return f[size_t(i)] == a && f[size_t(j)] == b;
                    });
                    EXPECT_TRUE(seen) << "factor " << i << " = " << a << " never meets factor " << j << " = " << b;
                }
    bool shape_seen[shapes::kTestShapes.size()] = {};
    for (const Case& c : cases) shape_seen[c.shape] = true;
    for (bool s : shape_seen) EXPECT_TRUE(s);
}

// ---- the reference checked by hand and against itself ---------------------------------------------------------
TEST(Reference, HandComputedSwiGluWithBiasAndSentinel) {
    // x = [1, 2]; expert 1: gate row [0.5, -1] + 0.25, up row [1, 1] - 0.5; down [[2], [-1]] + [0.1, 0.2].
    const int64_t T = 1, H = 2, I = 1, E = 2, k = 2;
    Tensor x(DType::kF32, {T, H}), ids(DType::kI64, {T, k}), w(DType::kF32, {T, k});
    Tensor up(DType::kF32, {E, 2 * I, H}), down(DType::kF32, {E, H, I}), bu(DType::kF32, {E, 2 * I}),
        bd(DType::kF32, {E, H});
    const float xv[] = {1, 2}, upv[] = {9, 9, 9, 9, 0.5f, -1, 1, 1}, downv[] = {9, 9, 2, -1};
    const float buv[] = {9, 9, 0.25f, -0.5f}, bdv[] = {9, 9, 0.1f, 0.2f}, wv[] = {0.75f, NAN};
    const int64_t idv[] = {1, E};  // slot 1 is a sentinel with a NaN weight
    std::memcpy(x.data(), xv, sizeof xv), std::memcpy(up.data(), upv, sizeof upv);
    std::memcpy(down.data(), downv, sizeof downv), std::memcpy(bu.data(), buv, sizeof buv);
    std::memcpy(bd.data(), bdv, sizeof bdv), std::memcpy(w.data(), wv, sizeof wv);
    std::memcpy(ids.data(), idv, sizeof idv);
    ExpertsProblem p{x.view(), ids.view(), w.view(), up.view(), down.view(), bu.view(), bd.view()};
    ASSERT_NO_THROW(p.validate());
    double out[2];
    reference_experts(p, out);
    const double g = 0.5 * 1 - 1.0 * 2 + 0.25, u = 1 + 2 - 0.5, h = g / (1 + std::exp(-g)) * u;
    EXPECT_NEAR(out[0], 0.75 * (2 * h + double(0.1f)), 1e-12);
    EXPECT_NEAR(out[1], 0.75 * (-h + double(0.2f)), 1e-12);
}

TEST(Reference, HandComputedGptOssClampsAndUngatedRelu) {
    // E = H = I = 1, interleaved [g, u] = [2, -3] x: g = 10 -> min(10, 7) = 7, u = -15 -> -7.
    Tensor x(DType::kF32, {1, 1}), ids(DType::kI32, {1, 1}), w(DType::kF32, {1, 1});
    Tensor up(DType::kF32, {1, 2, 1}), down(DType::kF32, {1, 1, 1});
    *x.view().ptr<float>() = 5, *ids.view().ptr<int32_t>() = 0, *w.view().ptr<float>() = 0.5f;
    up.view().ptr<float>()[0] = 2, up.view().ptr<float>()[1] = -3, *down.view().ptr<float>() = 1;
    ExpertsProblem p{x.view(), ids.view(), w.view(), up.view(), down.view()};
    p.is_concatenated = false;
    p.gate = GateKind::kGptOss;
    ASSERT_NO_THROW(p.validate());
    double out = 0;
    reference_experts(p, &out);
    EXPECT_NEAR(out, 0.5 * (-7 + 1) * 7 / (1 + std::exp(-1.702 * 7)), 1e-6);  // alpha is a float: 1.702f
    // Ungated relu: relu(2 * 5) = 10 through the first row only.
    Tensor up1(DType::kF32, {1, 1, 1});
    *up1.view().ptr<float>() = 2;
    ExpertsProblem q{x.view(), ids.view(), w.view(), up1.view(), down.view()};
    q.has_gate = false, q.activation = Activation::kRelu;
    ASSERT_NO_THROW(q.validate());
    reference_experts(q, &out);
    EXPECT_EQ(out, 5.0);
}

// A transposed and an interleaved copy of the same experts give bit-identical reference outputs, and two slots with
// the same expert equal one slot with the summed weight: the reference's indexing agrees with itself.
TEST(Reference, LayoutsAndDuplicateSlotsAgree) {
    const int64_t T = 5, H = 7, I = 3, E = 3, k = 2;
    Variant v;
    v.bias = true;
    v.activation = Activation::kGelu;
    const HostProblem a(T, H, I, E, k, v, 7);
    Variant vt = v, vi = v;
    vt.transposed = true, vi.concatenated = false;
    const HostProblem b(T, H, I, E, k, vt, 8), c(T, H, I, E, k, vi, 9);
    const ExpertsProblem &pa = a.problem(), &pb = b.problem(), &pc = c.problem();
    const auto copy = [](const TensorView& dst, const TensorView& src) {
        std::memcpy(dst.data, src.data, size_t(src.nbytes()));
    };
    for (const ExpertsProblem* dst : {&pb, &pc}) {
        copy(dst->hidden_states, pa.hidden_states), copy(dst->top_k_index, pa.top_k_index);
        copy(dst->top_k_weights, pa.top_k_weights), copy(dst->down_bias, pa.down_bias);
    }
    copy(pb.gate_up_bias, pa.gate_up_bias);
    for (int64_t e = 0; e < E; ++e) {
        for (int64_t n = 0; n < 2 * I; ++n) {
            const int64_t ni = n < I ? 2 * n : 2 * (n - I) + 1;  // stacked column n -> interleaved column
            store_from_double(pc.gate_up_bias, e * 2 * I + ni, load_as_double(pa.gate_up_bias, e * 2 * I + n));
            for (int64_t h = 0; h < H; ++h) {
                const double w = load_as_double(pa.gate_up_proj, (e * 2 * I + n) * H + h);
                store_from_double(pb.gate_up_proj, (e * H + h) * 2 * I + n, w);
                store_from_double(pc.gate_up_proj, (e * 2 * I + ni) * H + h, w);
            }
        }
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < I; ++i) {
                const double w = load_as_double(pa.down_proj, (e * H + h) * I + i);
                store_from_double(pb.down_proj, (e * I + i) * H + h, w);
                store_from_double(pc.down_proj, (e * H + h) * I + i, w);
            }
    }
    std::vector<double> ra(T * H), rb(T * H), rc(T * H);
    reference_experts(pa, ra.data()), reference_experts(pb, rb.data()), reference_experts(pc, rc.data());
    EXPECT_EQ(ra, rb);
    EXPECT_EQ(ra, rc);

    // Duplicates: ids (1, 1) with weights (w0, w1) == ids (1, sentinel) with weights (w0 + w1, anything).
    HostProblem d(T, H, I, E, k, v, 7), s(T, H, I, E, k, v, 7);
    for (int64_t t = 0; t < T; ++t) {
        d.set_id(t, 0, 1), d.set_id(t, 1, 1), s.set_id(t, 0, 1), s.set_id(t, 1, -1);
        d.set_weight(t, 0, 0.25), d.set_weight(t, 1, 0.5), s.set_weight(t, 0, 0.75), s.set_weight(t, 1, NAN);
    }
    std::vector<double> rd(T * H), rs(T * H);
    reference_experts(d.problem(), rd.data()), reference_experts(s.problem(), rs.data());
    for (int64_t i = 0; i < T * H; ++i) EXPECT_NEAR(rd[i], rs[i], 1e-12 * (1 + std::fabs(rs[i])));
}

}  // namespace
}  // namespace moex::test
