// The CUDA experts backward (batched_mm and grouped_mm share it) against the float64 reference backward
// (backward_reference.h): every layout x activation x {bf16, f16, f32} x T in {0, 1, 23, 300} with sentinel ids,
// gradients poisoned before each run; larger shapes with column and K tails; two runs bitwise equal; only the
// requested gradients written. Skips itself without a CUDA device.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "moex/backend.h"
#include "moex/backward.h"
#include "moex/device.h"
#include "tests/backward_reference.h"
#include "tests/test_support.h"

namespace moex::test {
namespace {

#define MOEX_NEED_CUDA()                                                \
    do {                                                                \
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
    } while (0)

// Gradient buffers on the device shaped like the problem's inputs, poisoned (0xff: NaN) before each run.
struct DeviceGrads {
    DeviceTensor x, w, up, down, bu, bd;
    ExpertsGrads views;
    explicit DeviceGrads(const ExpertsProblem& p) {
        auto like = [](const TensorView& v) { return DeviceTensor(v.dtype, v.shape, v.ndim, Device::kCUDA); };
        x = like(p.hidden_states), w = like(p.top_k_weights), up = like(p.gate_up_proj), down = like(p.down_proj);
        views = {x.view(), w.view(), up.view(), down.view(), {}, {}};
        if (p.gate_up_bias.defined()) bu = like(p.gate_up_bias), views.gate_up_bias = bu.view();
        if (p.down_bias.defined()) bd = like(p.down_bias), views.down_bias = bd.view();
        for (DeviceTensor* t : {&x, &w, &up, &down, &bu, &bd})
            if (t->view().defined()) t->fill_bytes(0xff);
    }
};

// A device gradient copied to the host (an undefined one stays undefined).
Tensor to_host(const DeviceTensor& d) {
    const TensorView& v = d.view();
    if (!v.defined()) return Tensor();
    Tensor h(v.dtype, v.shape, v.ndim);
    d.copy_to_host(h.view());
    return h;
}

struct HostGrads {
    Tensor x, w, up, down, bu, bd;
};

HostGrads run_cuda_backward(const char* backend, const PlacedProblem& placed, const DeviceTensor& dout,
                            const DeviceGrads& g) {
    ExpertsInterface::global().backward(backend, placed.problem, dout.view(), g.views);
    device_synchronize(Device::kCUDA);
    return {to_host(g.x), to_host(g.w), to_host(g.up), to_host(g.down), to_host(g.bu), to_host(g.bd)};
}

// Whether the backward that runs reads A = x·Wuᵀ + bu in bf16 (kept by the forward or recomputed and rounded; the
// reference then rounds its A the same way) and stores bf16 copies of dA and w·h and builds dx, d gate_up_proj and
// d down_proj from them: the tensor-core backward (bf16 on Hopper, backward_sm90.cu) unless MOEX_BACKWARD=simt; other
// GPUs run the SIMT backward in f32 and keep the plain bound. Each rounding moves a product by at most 2^-8 of it
// (bf16's unit roundoff), so those gradients get 2^-8 of the magnitude sums of their products (forward_backward's mag)
// as slack on top of the plain bf16 bound: heavy single terms (gpt-oss's clamped SwiGLU has dA terms of ~7 where the
// gradient's rms is 2) can put a correct value past a bound made of rms alone. For scale: bench/backward_precision.py
// puts this pipeline at 0.8-1.3 of the plain bound (0.15-0.45 with the slack) and torch's own bf16 autograd of the same
// math at 1.4-3.9 (gated SiLU) and up to 222 (the clamped SwiGLU) (bench/RESULTS.md O2).
bool stores_bf16_intermediates(DType dt) {
    const char* path = std::getenv("MOEX_BACKWARD");
    return dt == DType::kBF16 && cuda_compute_capability() == 90 && !(path && std::string(path) == "simt");
}

std::vector<double> times(std::vector<double> v, double f) {
    for (double& x : v) x *= f;
    return v;
}

// Every gradient against the float64 reference; sentinel slots' weight gradients exactly 0.
void expect_matches_reference(const ExpertsProblem& p, const Tensor& dout, const HostGrads& b) {
    const Dense d = dense_of(p);
    Grads64 r, mag;
    const DType dt = p.dtype();
    const bool slack = stores_bf16_intermediates(dt);
    // The tensor-core backward (H and I multiples of 8: its GEMMs' 16-byte rows) reads A in bf16, kept or recomputed:
    // the reference rounds its A the same way. The SIMT backward (other shapes) keeps A in f32.
    const bool round_a = slack && p.H() % 8 == 0 && p.I() % 8 == 0;
    forward_backward(d, as_doubles(dout.view()), dt == DType::kF32 ? DType::kF64 : dt, &r, &mag, round_a);
    const std::vector<double> sx = times(mag.x, 0x1p-8), su = up_storage(d, times(mag.wu, 0x1p-8)),
                              sd = down_storage(d, times(mag.wd, 0x1p-8));
    EXPECT_TRUE(close("dx", b.x.view(), r.x, dt, slack ? &sx : nullptr));
    EXPECT_TRUE(close("dw", b.w.view(), r.w, dt));
    EXPECT_TRUE(close("d gate_up_proj", b.up.view(), up_storage(d, r.wu), dt, slack ? &su : nullptr));
    EXPECT_TRUE(close("d down_proj", b.down.view(), down_storage(d, r.wd), dt, slack ? &sd : nullptr));
    if (p.gate_up_bias.defined()) EXPECT_TRUE(close("d gate_up_bias", b.bu.view(), r.bu, dt));
    if (p.down_bias.defined()) EXPECT_TRUE(close("d down_bias", b.bd.view(), r.bd, dt));
    for (int64_t s = 0; s < p.T() * p.k(); ++s) {
        const int64_t e = d.ids[size_t(s)];
        if (e < 0 || e >= p.E()) {
            const double got = load_as_double(b.w.view(), s);
            EXPECT_TRUE(got == 0.0 && !std::signbit(got)) << "sentinel slot " << s << ": dw = " << got;
        }
    }
}

// One problem through both CUDA backends.
void check_problem(const HostProblem& hp, uint64_t seed) {
    const ExpertsProblem& p = hp.problem();
    const Tensor dout = grad_out_for(p, seed);
    const PlacedProblem placed = place(p, Device::kCUDA);
    const DeviceTensor dout_dev = DeviceTensor::from_host(dout.view(), Device::kCUDA);
    for (const char* backend : {"grouped_mm", "batched_mm"}) {
        SCOPED_TRACE(backend);
        const DeviceGrads g(placed.problem);
        expect_matches_reference(p, dout, run_cuda_backward(backend, placed, dout_dev, g));
    }
}

// Every layout with SiLU or gpt-oss's clamped gate at (T, H, I, E, k = 2), with sentinel slots and expert E - 1 left
// unhit, through check_problem; stops at the first failing layout.
void check_gated_layouts(DType dt, int64_t T, int64_t H, int64_t I, int64_t E, uint64_t& seed) {
    for (const Variant& v : all_layouts(dt)) {
        if (v.activation != Activation::kSilu && v.gate != GateKind::kGptOss) continue;
        SCOPED_TRACE(v.name());
        HostProblem hp(T, H, I, E, 2, v, ++seed);
        add_sentinels(hp, T, 2, E, /*unhit=*/E - 1);
        check_problem(hp, seed);
        if (::testing::Test::HasFailure()) return;
    }
}

class BackwardCuda : public ::testing::TestWithParam<DType> {};

TEST_P(BackwardCuda, EveryLayoutAndTokenCountMatchesReference) {
    MOEX_NEED_CUDA();
    uint64_t seed = 500;
    for (const Variant& v : all_layouts(GetParam()))
        for (int64_t T : {0, 1, 23, 300}) {
            SCOPED_TRACE(v.name() + " T=" + std::to_string(T));
            const int64_t E = 6, k = 3;
            HostProblem hp(T, 24, 20, E, k, v, ++seed);
            if (T > 0) add_sentinels(hp, T, k, E, /*unhit=*/5);
            check_problem(hp, seed);
            if (HasFailure()) return;  // one failing layout is enough to read
        }
}

// Column tiles with tails (N = 144, H = 136 over 64-wide tiles), K slices with tails (136 = 8 x 16 + 8), many
// 64-row tiles per expert, an expert no token reaches.
TEST_P(BackwardCuda, LargerShapesMatchReference) {
    MOEX_NEED_CUDA();
    uint64_t seed = 900;
    check_gated_layouts(GetParam(), 300, 136, 72, 5, seed);
}

// I not a multiple of 4 (the gate pass's element-wise path, rows not 16-byte aligned) and H not a multiple of 8 (the
// token sum's element-wise path): the SIMT backward everywhere (the tensor-core GEMMs refuse N = 2I = 36).
TEST_P(BackwardCuda, UnalignedRowsMatchReference) {
    MOEX_NEED_CUDA();
    uint64_t seed = 1300;
    check_gated_layouts(GetParam(), 37, 22, 18, 5, seed);
}

TEST_P(BackwardCuda, TwoRunsAreBitwiseEqual) {
    MOEX_NEED_CUDA();
    Variant v;
    v.dtype = GetParam(), v.bias = true, v.weights_f32 = false, v.concatenated = false;
    HostProblem hp(300, 136, 72, 5, 3, v, 31);
    add_sentinels(hp, 300, 3, 5, 4);
    const Tensor dout = grad_out_for(hp.problem(), 32);
    const PlacedProblem placed = place(hp.problem(), Device::kCUDA);
    const DeviceTensor dout_dev = DeviceTensor::from_host(dout.view(), Device::kCUDA);
    const DeviceGrads g1(placed.problem);
    const HostGrads one = run_cuda_backward("grouped_mm", placed, dout_dev, g1);
    // The CUDA backward is one for every backend that has it (eager's forward loops over experts; its gradients
    // are the shared backward's all the same).
    for (const char* other : {"batched_mm", "eager"}) {
        SCOPED_TRACE(other);
        const DeviceGrads g2(placed.problem);
        const HostGrads two = run_cuda_backward(other, placed, dout_dev, g2);
        EXPECT_TRUE(bitwise_equal(one.x, two.x));
        EXPECT_TRUE(bitwise_equal(one.w, two.w));
        EXPECT_TRUE(bitwise_equal(one.up, two.up));
        EXPECT_TRUE(bitwise_equal(one.down, two.down));
        EXPECT_TRUE(bitwise_equal(one.bu, two.bu));
        EXPECT_TRUE(bitwise_equal(one.bd, two.bd));
    }
    expect_matches_reference(hp.problem(), dout, one);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BackwardCuda, ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const ::testing::TestParamInfo<DType>& info) {
                             return std::string(dtype_name(info.param));
                         });

// bf16 shapes the tensor-core backward takes on Hopper (H and I multiples of 8: backward_sm90.cu), against the
// reference once by default (the tensor cores on an sm_90 device) and once forced to the SIMT path: several 64-row
// blocks per expert, partial tiles of the weight-gradient GEMM (I = 72 over 128 x 256 tiles), unhit experts. Both
// paths are deterministic: two runs of each are bitwise equal.
TEST(BackwardCudaOnly, TensorCoreShapesMatchReference) {
    MOEX_NEED_CUDA();
    struct Unset {
        ~Unset() { unsetenv("MOEX_BACKWARD"); }
    } unset;
    uint64_t seed = 1300;
    for (const char* path : {"default", "simt"}) {
        SCOPED_TRACE(path);
        if (std::string(path) == "simt") setenv("MOEX_BACKWARD", "simt", 1);
        check_gated_layouts(DType::kBF16, 700, 256, 72, 9, seed);
        if (HasFailure()) return;
        Variant v;
        v.dtype = DType::kBF16, v.bias = true;
        HostProblem hp(300, 136, 72, 5, 3, v, 41);
        const Tensor dout = grad_out_for(hp.problem(), 42);
        const PlacedProblem placed = place(hp.problem(), Device::kCUDA);
        const DeviceTensor dout_dev = DeviceTensor::from_host(dout.view(), Device::kCUDA);
        const DeviceGrads g1(placed.problem), g2(placed.problem);
        const HostGrads one = run_cuda_backward("grouped_mm", placed, dout_dev, g1);
        const HostGrads two = run_cuda_backward("grouped_mm", placed, dout_dev, g2);
        EXPECT_TRUE(bitwise_equal(one.x, two.x) && bitwise_equal(one.w, two.w) && bitwise_equal(one.up, two.up) &&
                    bitwise_equal(one.down, two.down) && bitwise_equal(one.bu, two.bu) &&
                    bitwise_equal(one.bd, two.bd));
    }
}

TEST(BackwardCudaOnly, RequestedGradientsOnly) {
    MOEX_NEED_CUDA();
    Variant v;
    v.dtype = DType::kBF16, v.bias = true;
    for (const int64_t I : {20, 64}) {  // I = 64: the tensor-core path on Hopper; 20: SIMT everywhere
        SCOPED_TRACE("I=" + std::to_string(I));
        HostProblem hp(40, 24, I, 4, 2, v, 51);
        const Tensor dout = grad_out_for(hp.problem(), 52);
        const PlacedProblem placed = place(hp.problem(), Device::kCUDA);
        const DeviceTensor dout_dev = DeviceTensor::from_host(dout.view(), Device::kCUDA);
        const DeviceGrads all(placed.problem);
        const HostGrads want = run_cuda_backward("grouped_mm", placed, dout_dev, all);
        for (int which = 0; which < 3; ++which) {  // dw + d down bias alone (no GEMM needed for the bias), dx, d down
            SCOPED_TRACE(which);
            const DeviceGrads fresh(placed.problem);
            ExpertsGrads only;
            if (which == 0) only.top_k_weights = fresh.w.view(), only.down_bias = fresh.bd.view();
            if (which == 1) only.hidden_states = fresh.x.view();
            if (which == 2) only.down_proj = fresh.down.view();
            ExpertsInterface::global().backward("grouped_mm", placed.problem, dout_dev.view(), only);
            device_synchronize(Device::kCUDA);
            const HostGrads got{to_host(fresh.x),    to_host(fresh.w),  to_host(fresh.up),
                                to_host(fresh.down), to_host(fresh.bu), to_host(fresh.bd)};
            if (which == 0) EXPECT_TRUE(bitwise_equal(want.w, got.w) && bitwise_equal(want.bd, got.bd));
            if (which == 1) EXPECT_TRUE(bitwise_equal(want.x, got.x));
            if (which == 2) EXPECT_TRUE(bitwise_equal(want.down, got.down));
            const auto* up = static_cast<const uint16_t*>(got.up.data());
            EXPECT_EQ(up[0], 0xffffu);  // never asked for: untouched
        }
    }
}

// A training forward that keeps its gate/up pre-activation (ExpertsSaved) gives the plain forward's output bits, keeps
// x·Wuᵀ + bu of every slot (within bf16's rounding of the float64 value), and its backward gives the recomputing
// backward's bits: every gated layout, biases, sentinels, I with a partial 64-column box, T with partial row boxes.
TEST(BackwardCudaOnly, KeptPreactivationGivesTheRecomputedBits) {
    MOEX_NEED_CUDA();
    const Backend& grouped = ExpertsInterface::global().get("grouped_mm");
    uint64_t seed = 1700;
    for (const Variant& v0 : all_layouts(DType::kBF16)) {
        if (!v0.has_gate || (v0.activation != Activation::kSilu && v0.gate != GateKind::kGptOss)) continue;
        for (const int64_t T : {1, 23, 300}) {
            Variant v = v0;
            v.bias = T != 23;
            SCOPED_TRACE(v.name() + " T=" + std::to_string(T));
            const int64_t H = 136, I = 72, E = 5, k = 3, S = T * k, N = 2 * I;
            HostProblem hp(T, H, I, E, k, v, ++seed);
            add_sentinels(hp, T, k, E, /*unhit=*/4);
            const PlacedProblem placed = place(hp.problem(), Device::kCUDA);
            if (auto why = grouped.save_refusal(placed.problem)) GTEST_SKIP() << *why;
            const int64_t gu_shape[2] = {S, N}, row_shape[1] = {S};
            DeviceTensor gu(DType::kBF16, gu_shape, 2, Device::kCUDA), rows(DType::kI32, row_shape, 1, Device::kCUDA);
            gu.fill_bytes(0xff), rows.fill_bytes(0x7f);
            const ExpertsSaved saved{gu.view(), rows.view()};
            RunOptions keep;
            keep.saved = &saved;
            EXPECT_TRUE(bitwise_equal(run_backend(grouped, placed), run_backend(grouped, placed, keep)));

            // The kept rows: each slot's row holds x·Wuᵀ + bu rounded once (a 16-bit kernel's f32 sum: within 2^-8
            // of the value plus the sum's own error, bound by 2^-12 of the products' magnitudes).
            Tensor host_gu(DType::kBF16, {S, N}), host_rows(DType::kI32, {S});
            gu.copy_to_host(host_gu.view()), rows.copy_to_host(host_rows.view());
            const Dense d = dense_of(hp.problem());
            const auto* row_of = static_cast<const int32_t*>(host_rows.data());
            int64_t bad = 0;
            for (int64_t s = 0; s < S; ++s) {
                const int64_t t = s / k, e = d.ids[size_t(s)];
                if (e < 0 || e >= E) {
                    bad += row_of[s] != -1;
                    continue;
                }
                for (int64_t n = 0; n < N; ++n) {
                    double a = v.bias ? d.bu[size_t(e * N + n)] : 0.0, mag = std::fabs(a);
                    for (int64_t c = 0; c < H; ++c) {
                        const double term = d.x[size_t(t * H + c)] * d.wu[size_t((e * N + n) * H + c)];
                        a += term, mag += std::fabs(term);
                    }
                    const double got = load_as_double(host_gu.view(), row_of[s] * N + n);
                    bad += !(std::fabs(got - a) <= 0x1p-8 * std::fabs(a) + 0x1p-12 * mag);
                }
            }
            EXPECT_EQ(bad, 0);

            const Tensor dout = grad_out_for(hp.problem(), seed);
            const DeviceTensor dout_dev = DeviceTensor::from_host(dout.view(), Device::kCUDA);
            const DeviceGrads g1(placed.problem), g2(placed.problem);
            const HostGrads one = run_cuda_backward("grouped_mm", placed, dout_dev, g1);
            ExpertsInterface::global().backward("grouped_mm", placed.problem, dout_dev.view(), g2.views, keep);
            device_synchronize(Device::kCUDA);
            const HostGrads two{to_host(g2.x),    to_host(g2.w),  to_host(g2.up),
                                to_host(g2.down), to_host(g2.bu), to_host(g2.bd)};
            EXPECT_TRUE(bitwise_equal(one.x, two.x) && bitwise_equal(one.w, two.w) && bitwise_equal(one.up, two.up) &&
                        bitwise_equal(one.down, two.down) && bitwise_equal(one.bu, two.bu) &&
                        bitwise_equal(one.bd, two.bd));
            expect_matches_reference(hp.problem(), dout, one);
            if (HasFailure()) return;
        }
    }
}

// What keeps and what refuses: the CPU and the other pipelines keep nothing and say so; bad views are named.
TEST(BackwardCudaOnly, KeepingRefusesClearly) {
    const ExpertsInterface& reg = ExpertsInterface::global();
    Variant v;
    v.dtype = DType::kBF16;
    HostProblem hp(8, 64, 32, 4, 2, v, 91);
    EXPECT_TRUE(reg.get("grouped_mm").save_refusal(hp.problem()).has_value());  // host tensors
    const int64_t gu_shape[2] = {16, 64}, row_shape[1] = {16};
    Tensor gu(DType::kBF16, gu_shape, 2), rows(DType::kI32, row_shape, 1);
    const ExpertsSaved saved{gu.view(), rows.view()};
    RunOptions keep;
    keep.saved = &saved;
    Tensor out(DType::kBF16, {8, 64});
    expect_error([&] { reg.run("grouped_mm", hp.problem(), out.view(), keep); }, ErrorCode::kUnsupported,
                 "cannot keep the forward's activations here");
    MOEX_NEED_CUDA();
    const PlacedProblem placed = place(hp.problem(), Device::kCUDA);
    EXPECT_TRUE(reg.get("batched_mm").save_refusal(placed.problem).has_value());
    EXPECT_TRUE(reg.get("eager").save_refusal(placed.problem).has_value());
    EXPECT_TRUE(reg.get("deepgemm").save_refusal(placed.problem).has_value());
    if (reg.get("grouped_mm").save_refusal(placed.problem)) GTEST_SKIP() << "no sm_90 device";
    const int64_t wrong_shape[2] = {16, 32};
    DeviceTensor dgu(DType::kBF16, wrong_shape, 2, Device::kCUDA), drows(DType::kI32, row_shape, 1, Device::kCUDA);
    const ExpertsSaved wrong{dgu.view(), drows.view()};
    RunOptions bad;
    bad.saved = &wrong;
    const DeviceTensor dout(DType::kBF16, std::array<int64_t, 2>{8, 64}.data(), 2, Device::kCUDA);
    expect_error([&] { reg.run("grouped_mm", placed.problem, dout.view(), bad); }, ErrorCode::kInvalidArgument,
                 "saved gate_up has shape (16, 32), expected (T*k, N) = (16, 64)");
}

TEST(BackwardCudaOnly, EveryBackendButDeepgemmHasOne) {
    const ExpertsInterface& reg = ExpertsInterface::global();
    EXPECT_TRUE(reg.get("eager").has_backward(Device::kCUDA));
    EXPECT_TRUE(reg.get("batched_mm").has_backward(Device::kCUDA));
    EXPECT_TRUE(reg.get("grouped_mm").has_backward(Device::kCUDA));
    EXPECT_TRUE(reg.get("sonicmoe").has_backward(Device::kCUDA));
    MOEX_NEED_CUDA();
    HostProblem hp(4, 16, 8, 2, 1, Variant{}, 81);
    const PlacedProblem placed = place(hp.problem(), Device::kCUDA);
    const DeviceTensor dout = DeviceTensor::from_host(grad_out_for(hp.problem(), 82).view(), Device::kCUDA);
    EXPECT_FALSE(reg.get("deepgemm").has_backward(Device::kCUDA));
    expect_error([&] { reg.backward("deepgemm", placed.problem, dout.view(), ExpertsGrads{}); },
                 ErrorCode::kUnsupported, "backends with one there: eager, batched_mm, grouped_mm, sonicmoe");
}

}  // namespace
}  // namespace moex::test
