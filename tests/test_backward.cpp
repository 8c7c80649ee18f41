// The experts backward (moex/backward.h) on the CPU against the float64 analytic backward (backward_reference.h),
// itself checked here against the shared forward reference and central finite differences of its forward: every
// layout x activation x {f32, bf16}, sentinels, experts no token reaches, T = 0, more rows per expert than one
// block, bitwise determinism across thread counts, refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "moex/backend.h"
#include "moex/backward.h"
#include "tests/backward_reference.h"
#include "tests/test_support.h"

namespace moex::test {
namespace {

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
        EXPECT_TRUE(reg.get(name).has_backward(Device::kCUDA));
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
    const ExpertsInterface& reg = ExpertsInterface::global();
    EXPECT_EQ(reg.backward_names_text(Device::kCUDA), "eager, batched_mm, grouped_mm, sonicmoe");
    expect_error(
        [&] { reg.backward("deepgemm", p, g, ExpertsGrads{}); }, ErrorCode::kUnsupported,
        "`deepgemm` has no backward on cuda; backends with one there: eager, batched_mm, grouped_mm, sonicmoe");
    // sonicmoe's backward keeps its forward's contract: f32 experts are refused by name before any kernel.
    expect_error([&] { reg.backward("sonicmoe", p, g, ExpertsGrads{}); }, ErrorCode::kUnsupported,
                 "sonicmoe backward: ");
#if !MOEX_WITH_CUDA  // with CUDA these views would reach the kernels: tests/test_backward_cuda.cpp runs real ones
    expect_error([&] { reg.backward("grouped_mm", p, g, ExpertsGrads{}); }, ErrorCode::kUnsupported,
                 "experts backward on cuda: this build of moex has no CUDA support");
#endif
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
