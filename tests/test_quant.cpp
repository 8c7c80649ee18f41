// Quantized experts (moex/quant.h): the scalar codecs, the quantizer, validation errors, every CPU backend x format x
// layout against the float64 reference on the dequantized values, the AVX2 dequantizer against the scalar one, and
// quantized results against the bf16 experts they came from.
#include <cmath>
#include <cstring>

#include "moex/problem_file.h"
#include "moex/quant.h"
#include "src/cpu/kernels.h"
#include "tests/test_support.h"

namespace moex::test {
namespace {

// ---- codecs ----

TEST(QuantCodec, E4M3RoundTripsEveryCode) {
    for (int b = 0; b < 256; ++b) {
        const float v = fp8e4m3_to_f32(uint8_t(b));
        if (std::isnan(v)) {
            EXPECT_EQ(f32_to_fp8e4m3(v) & 0x7f, 0x7f) << b;
            continue;
        }
        EXPECT_EQ(int(f32_to_fp8e4m3(v)), b) << "code " << b << " value " << v;
    }
}

TEST(QuantCodec, E4M3RoundsToNearestEvenAndSaturates) {
    EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(1.0625f)), 1.0f);   // midpoint of 1 and 1.125: even (1.0)
    EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(1.1875f)), 1.25f);  // midpoint of 1.125 and 1.25: even (1.25)
    EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(1.07f)), 1.125f);
    EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(460.0f)), 448.0f);  // saturates instead of NaN
    EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(-1e9f)), -448.0f);
    EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(0x1.0p-10f)), 0.0f);  // half the smallest subnormal: even (0)
    EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(0x1.8p-9f)), 0x1.0p-8f);
}

TEST(QuantCodec, E2M1EncodesEveryCodeAndTiesToEven) {
    for (int c = 0; c < 16; ++c) {
        if (c == 8) continue;  // -0 encodes as -0 (code 8) and decodes as 0
        EXPECT_EQ(int(f32_to_fp4e2m1(fp4e2m1_to_f32(uint8_t(c)))), c);
    }
    EXPECT_EQ(fp4e2m1_to_f32(f32_to_fp4e2m1(0.25f)), 0.0f);
    EXPECT_EQ(fp4e2m1_to_f32(f32_to_fp4e2m1(0.75f)), 1.0f);
    EXPECT_EQ(fp4e2m1_to_f32(f32_to_fp4e2m1(2.5f)), 2.0f);
    EXPECT_EQ(fp4e2m1_to_f32(f32_to_fp4e2m1(5.0f)), 4.0f);
    EXPECT_EQ(fp4e2m1_to_f32(f32_to_fp4e2m1(-100.0f)), -6.0f);
}

TEST(QuantCodec, Ue8m0CeilIsTheNextPowerOfTwo) {
    EXPECT_EQ(ue8m0_to_f32(ue8m0_ceil(1.0f)), 1.0f);
    EXPECT_EQ(ue8m0_to_f32(ue8m0_ceil(1.01f)), 2.0f);
    EXPECT_EQ(ue8m0_to_f32(ue8m0_ceil(0.3f)), 0.5f);
    EXPECT_EQ(ue8m0_to_f32(ue8m0_ceil(0x1.0p-20f)), 0x1.0p-20f);
}

// ---- quantized problems ----

struct Scheme {
    const char* name;
    QuantFormat format;
    int64_t block_n, block_k;  // fp8
    DType scale_dtype;         // fp8
    ActivationQuant act;
    float static_range = 8.0f;  // kStatic: 448 * activation_scale of the first expert (the others 2x)
};

const Scheme kSchemes[] = {
    {"fp8_32x32_float", QuantFormat::kFp8, 32, 32, DType::kF32, ActivationQuant::kDynamic},
    {"fp8_32x32_ue8m0", QuantFormat::kFp8, 32, 32, DType::kUE8M0, ActivationQuant::kDynamic},
    {"fp8_per_tensor", QuantFormat::kFp8, 0, 0, DType::kF32, ActivationQuant::kDynamic},
    {"fp8_static", QuantFormat::kFp8, 32, 32, DType::kF32, ActivationQuant::kStatic},
    {"fp8_static_clamped", QuantFormat::kFp8, 32, 32, DType::kF32, ActivationQuant::kStatic, 1.5f},  // saturates
    {"fp8_weight_only", QuantFormat::kFp8, 32, 32, DType::kUE8M0, ActivationQuant::kNone},
    {"mxfp4", QuantFormat::kMxfp4, 0, 0, DType::kUE8M0, ActivationQuant::kNone},
    {"nvfp4", QuantFormat::kNvfp4, 0, 0, DType::kFP8E4M3, ActivationQuant::kNone},
};

// A HostProblem whose weights are replaced by their quantization (the original kept for the end-to-end check).
class QuantProblem {
   public:
    QuantProblem(int64_t T, int64_t H, int64_t I, int64_t E, int64_t k, const Variant& v, const Scheme& s,
                 uint64_t seed)
        : host_(T, H, I, E, k, v, seed) {
        p_ = host_.problem();
        weights_ = quantize_experts(p_, s.format, s.block_n, s.block_k, s.scale_dtype);
        ExpertsQuant& q = p_.quant;
        q.activations = s.act;
        if (s.act == ActivationQuant::kStatic) {
            up_act_ = Tensor(DType::kF32, {E}), down_act_ = Tensor(DType::kF32, {E});
            for (int64_t e = 0; e < E; ++e) {  // range 8: x ~ N(0, 1) and h never saturate; 1.5: many do
                static_cast<float*>(up_act_.data())[e] = s.static_range / 448.0f * float(1 + e % 2);
                static_cast<float*>(down_act_.data())[e] = s.static_range / 448.0f * float(1 + e % 2);
            }
            q.gate_up.activation_scale = up_act_.view(), q.down.activation_scale = down_act_.view();
        }
        p_.validate();
    }
    const ExpertsProblem& problem() const { return p_; }
    const ExpertsProblem& original() const { return host_.problem(); }

   private:
    HostProblem host_;
    QuantizedExperts weights_;
    Tensor up_act_, down_act_;
    ExpertsProblem p_;
};

const char* const kCpuBackends[] = {"eager", "batched_mm", "grouped_mm"};

struct LayoutCase {
    const char* name;
    Variant v;
};
const LayoutCase kLayouts[] = {
    {"stacked", Variant{}},
    {"interleaved", Variant{.concatenated = false}},
    {"ungated_gelu", Variant{.has_gate = false, .activation = Activation::kGelu}},
    {"gptoss_bias", Variant{.gate = GateKind::kGptOss, .concatenated = false, .bias = true}},
};

// Every CPU backend x scheme x layout x activation dtype, at T that takes the streaming path (1, 23) and the packed
// one (160 tokens over 4 experts), against the reference on the dequantized weights with the dtype's tolerance.
TEST(QuantBackends, MatchTheReferenceOnDequantizedValues) {
    int ran = 0;
    for (const Scheme& s : kSchemes)
        for (const LayoutCase& lc : kLayouts)
            for (DType dt : {DType::kF32, DType::kBF16})
                for (int64_t T : {1, 23, 160}) {
                    Variant v = lc.v;
                    v.dtype = dt;
                    const QuantProblem qp(T, 64, 64, 4, 2, v, s, 100 + uint64_t(T));
                    const std::vector<double> ref = reference_of(qp.problem());
                    for (const char* name : kCpuBackends) {
                        const Backend& b = ExpertsInterface::global().get(name);
                        ASSERT_EQ(b.why_not(qp.problem()), std::nullopt) << name;
                        const Tensor out = run_backend(b, place(qp.problem(), Device::kCPU));
                        EXPECT_TRUE(outputs_close(out.view(), ref, {}, tolerance_for(qp.problem())))
                            << name << " " << s.name << " " << lc.name << " " << dtype_name(dt) << " T=" << T;
                        ++ran;
                    }
                }
    EXPECT_EQ(ran, 8 * 4 * 2 * 3 * 3);
}

// DeepSeek's 128 x 128 blocks on a shape they divide, through the packed path with several k blocks.
TEST(QuantBackends, Fp8Blocks128MatchTheReference) {
    const Scheme s{"fp8_128", QuantFormat::kFp8, 128, 128, DType::kF32, ActivationQuant::kDynamic};
    const QuantProblem qp(96, 512, 256, 3, 2, Variant{.dtype = DType::kBF16}, s, 7);
    const std::vector<double> ref = reference_of(qp.problem());
    for (const char* name : kCpuBackends)
        EXPECT_TRUE(
            outputs_close(run_backend(ExpertsInterface::global().get(name), place(qp.problem(), Device::kCPU)).view(),
                          ref, {}, tolerance_for(qp.problem())))
            << name;
}

// The same bytes for any thread count, and the same bytes from the scalar and AVX2 dequantizers.
TEST(QuantBackends, BitwiseDeterministic) {
    for (const Scheme& s : kSchemes) {
        const QuantProblem qp(70, 64, 64, 4, 2, Variant{.dtype = DType::kBF16}, s, 3);
        for (const char* name : kCpuBackends) {
            const Backend& b = ExpertsInterface::global().get(name);
            const PlacedProblem placed = place(qp.problem(), Device::kCPU);
            const Tensor one = run_backend(b, placed, RunOptions{.num_threads = 1});
            EXPECT_TRUE(bitwise_equal(one, run_backend(b, placed, RunOptions{.num_threads = 3})))
                << name << " " << s.name;
        }
    }
}

TEST(QuantKernels, Avx2DequantMatchesScalarBitwise) {
    const cpu::KernelTable* avx2 = cpu::avx2_kernels();
    if (!avx2) GTEST_SKIP() << "this CPU has no AVX2";
    for (const Scheme& s : kSchemes) {
        // Odd sizes: per-tensor scales allow any K, so the vector loops meet their scalar tails.
        const bool any_k = s.format == QuantFormat::kFp8 && s.block_n == 0;
        const int64_t K = any_k ? 77 : 96, N = 64;
        const QuantProblem qp(1, K, N / 2, 2, 1, Variant{}, s, 11);  // gate_up (2, N, K)
        const ExpertsProblem& p = qp.problem();
        if (s.format == QuantFormat::kFp8) static_cast<uint8_t*>(p.gate_up_proj.data)[5] = 0x7f;  // NaN stays NaN
        const cpu::CpuProblem cp = cpu::unpack_problem(p);
        for (int64_t e = 0; e < 2; ++e)
            for (int64_t n0 : {int64_t(0), int64_t(3)})
                for (int64_t k0 : {int64_t(0), int64_t(32)}) {
                    const cpu::WeightMat w = cp.up(e).from_row(n0);
                    const int64_t n = N - n0, kc = K - k0;
                    std::vector<float> a(size_t(n * kc)), b(size_t(n * kc));
                    cpu::scalar_kernels().dequant(w, n, k0, kc, a.data(), kc);
                    avx2->dequant(w, n, k0, kc, b.data(), kc);
                    int64_t differ = 0;  // bits, except that any NaN matches any NaN
                    for (size_t i = 0; i < a.size(); ++i)
                        differ += std::isnan(a[i]) ? !std::isnan(b[i]) : std::memcmp(&a[i], &b[i], 4) != 0;
                    EXPECT_EQ(differ, 0) << s.name << " e=" << e << " n0=" << n0 << " k0=" << k0;
                    if (s.format == QuantFormat::kFp8 && e == 0 && n0 == 0 && k0 == 0) EXPECT_TRUE(std::isnan(b[5]));
                }
    }
}

// The fused decode kernel (codes decoded and scaled in registers) gives the bits of the f32 streaming kernel on the
// dequantized rows, for 1-4 rows of A and row tiles that do not divide N.
TEST(QuantKernels, FusedStreamMatchesDequantizedStreamBitwise) {
    const cpu::KernelTable* avx2 = cpu::avx2_kernels();
    if (!avx2) GTEST_SKIP() << "this CPU has no AVX2";
    for (const Scheme& s : kSchemes) {
        const int64_t K = 128, N = 64;
        const QuantProblem qp(1, K, N / 2, 2, 1, Variant{}, s, 13);
        const cpu::CpuProblem cp = cpu::unpack_problem(qp.problem());
        const cpu::WeightMat w = cp.up(1).from_row(5);
        const int64_t n = N - 5 - 2;
        std::vector<float> a(size_t(4 * K)), deq(size_t(n * K)), want(size_t(4 * n)), got(size_t(4 * n));
        for (size_t i = 0; i < a.size(); ++i) a[i] = float(std::sin(0.37 * double(i)));
        const float* rows[4] = {a.data(), a.data() + K, a.data() + 2 * K, a.data() + 3 * K};
        avx2->dequant(w, n, 0, K, deq.data(), K);
        for (int64_t m = 1; m <= 4; ++m) {
            avx2->stream(rows, m, cpu::WeightMat{deq.data(), DType::kF32, false, K, K}, n, want.data(), n);
            ASSERT_TRUE(avx2->stream_fused(rows, m, w, n, got.data(), n)) << s.name;
            EXPECT_EQ(std::memcmp(want.data(), got.data(), size_t(m * n) * 4), 0) << s.name << " m=" << m;
        }
    }
}

// End to end: the quantized experts stay close to the bf16 experts they were made from (measured rms: FP8 ~3-6%,
// FP4 ~15-20%; the static scales leave x and h far from saturation).
TEST(QuantBackends, CloseToTheUnquantizedExperts) {
    for (const Scheme& s : kSchemes) {
        if (s.static_range < 8.0f) continue;  // saturating on purpose
        const QuantProblem qp(64, 128, 64, 4, 2, Variant{.dtype = DType::kBF16}, s, 5);
        const std::vector<double> exact = reference_of(qp.original());
        const Tensor got = run_backend(ExpertsInterface::global().get("grouped_mm"), place(qp.problem(), Device::kCPU));
        double se = 0, ss = 0;
        for (size_t i = 0; i < exact.size(); ++i) {
            const double d = load_as_double(got.view(), int64_t(i)) - exact[i];
            se += d * d, ss += exact[i] * exact[i];
        }
        const double rel = std::sqrt(se / ss);
        const double bound = s.format == QuantFormat::kFp8 ? 0.08 : 0.3;
        EXPECT_LT(rel, bound) << s.name;
        EXPECT_GT(rel, 1e-4) << s.name << ": suspiciously exact, are the weights quantized?";
    }
}

// ---- errors ----

TEST(QuantValidation, ErrorsNameTheTensorAndTheFix) {
    const Scheme fp8{"fp8", QuantFormat::kFp8, 32, 32, DType::kF32, ActivationQuant::kDynamic};
    const QuantProblem qp(4, 64, 64, 4, 2, Variant{.dtype = DType::kBF16}, fp8, 1);
    auto with = [&](auto edit) {
        ExpertsProblem p = qp.problem();
        edit(p);
        return p;
    };
    auto expect = [&](const ExpertsProblem& p, const std::string& part) {
        expect_error([&] { p.validate(); }, ErrorCode::kInvalidArgument, part);
    };
    Tensor wrong_scale(DType::kF32, {4, 3, 2});
    expect(with([&](ExpertsProblem& p) { p.quant.down.scale_inv = wrong_scale.view(); }),
           "down_proj_scale_inv has shape (4, 3, 2), expected (4, 2, 2) = (E, H / block_n, I / block_k)");
    expect(with([&](ExpertsProblem& p) { p.quant.gate_up.scale_inv = TensorView{}; }),
           "gate_up_proj_scale_inv is missing");
    Tensor bf16_scale(DType::kBF16, {4, 4, 2});
    expect(with([&](ExpertsProblem& p) { p.quant.gate_up.scale_inv = bf16_scale.view(); }),
           "gate_up_proj_scale_inv has dtype bfloat16, expected float32 or float8_e8m0fnu");
    expect(with([&](ExpertsProblem& p) { p.quant.block_n = 48, p.quant.block_k = 48; }),
           "gate_up_proj 2I = 128 is not a multiple of the block 48; use a weight_block_size that divides it");
    expect(with([&](ExpertsProblem& p) { p.quant.block_n = 0; }), "weight_block_size (0, 32) must be two positive");
    expect(with([&](ExpertsProblem& p) { p.quant.activations = ActivationQuant::kStatic; }),
           "gate_up_proj_activation_scale is missing");
    expect(with([&](ExpertsProblem& p) { p.is_transposed = true; }), "is_transposed=true is not supported");
    expect(with([&](ExpertsProblem& p) { p.quant.format = QuantFormat::kNone; }),
           "gate_up_proj has dtype float8_e4m3fn but the problem is not quantized");
    expect(with([&](ExpertsProblem& p) {
               p.quant.format = QuantFormat::kMxfp4;
               p.quant.activations = ActivationQuant::kNone;
           }),
           "gate_up_proj has dtype float8_e4m3fn, expected uint8 (two mxfp4 e2m1 codes per byte)");
    const Scheme mx{"mxfp4", QuantFormat::kMxfp4, 0, 0, DType::kUE8M0, ActivationQuant::kNone};
    const QuantProblem mq(4, 64, 64, 4, 2, Variant{}, mx, 1);
    ExpertsProblem p = mq.problem();
    p.quant.activations = ActivationQuant::kDynamic;
    expect(p, "activation_scheme dynamic is an FP8 scheme; mxfp4 weights take activations as they are");
    p = mq.problem();
    p.quant.format = QuantFormat::kNvfp4;
    expect(p, "gate_up_proj_scale_inv has dtype float8_e8m0fnu, expected float8_e4m3fn");
    const HostProblem odd(1, 64, 48, 2, 1, Variant{}, 1);  // down_proj (2, 64, 48): K = 48
    expect_error([&] { quantize_weights(odd.problem().down_proj, QuantFormat::kMxfp4); }, ErrorCode::kInvalidArgument,
                 "is not a multiple of the FP4 group 32");
}

TEST(QuantValidation, CudaAndUnawareBackendsRefuseQuantizedProblems) {
    const Scheme fp8{"fp8", QuantFormat::kFp8, 32, 32, DType::kF32, ActivationQuant::kDynamic};
    const QuantProblem qp(4, 64, 64, 4, 2, Variant{.dtype = DType::kBF16}, fp8, 1);
    for (const std::string& name : ExpertsInterface::global().names()) {
        const Backend& b = ExpertsInterface::global().get(name);
        const auto why = b.why_not(qp.problem());
        const bool cpu_kernel = name == "eager" || name == "batched_mm" || name == "grouped_mm";
        EXPECT_EQ(why.has_value(), !cpu_kernel) << name << ": " << why.value_or("");
    }
}

// ---- problem files ----

TEST(QuantProblemFile, RoundTripsEveryScheme) {
    for (const Scheme& s : kSchemes) {
        const QuantProblem qp(5, 64, 64, 4, 2, Variant{.dtype = DType::kBF16}, s, 9);
        const std::string path = temp_path(std::string("quant_") + s.name + ".safetensors");
        save_problem_file(path, qp.problem());
        const ProblemFile f = load_problem_file(path);
        const ExpertsQuant &a = f.problem.quant, &b = qp.problem().quant;
        EXPECT_EQ(a.format, b.format) << s.name;
        EXPECT_EQ(a.activations, b.activations) << s.name;
        if (s.format == QuantFormat::kFp8) EXPECT_EQ(a.block_n, b.block_n) << s.name;
        const Backend& g = ExpertsInterface::global().get("grouped_mm");
        EXPECT_TRUE(bitwise_equal(run_backend(g, place(f.problem, Device::kCPU)),
                                  run_backend(g, place(qp.problem(), Device::kCPU))))
            << s.name;
    }
}

}  // namespace
}  // namespace moex::test
