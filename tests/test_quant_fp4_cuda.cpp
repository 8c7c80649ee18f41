// The sm_90a grouped GEMM with FP4 weights (cuda/gemm/sm90_fp4.cuh: e2m1 codes converted to bf16 in shared memory by
// the consumer warpgroups) against a float64 GEMM of the same codes and scales, MXFP4 and NVFP4, launched on the sm_90a
// kernel itself (the portable kernel would pass these as well). The shapes it refuses: tests/test_sm90_config.cpp.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "moex/dtype.h"
#include "moex/quant.h"
#include "tests/grouped_gemm_routing.h"
#include "tests/test_support.h"
#if MOEX_WITH_CUDA
#include "cuda/gemm/grouped_gemm.h"
#include "src/backends/cuda_bridge.h"
#endif

namespace moex::test {
namespace {

#if MOEX_WITH_CUDA
bool cuda_here() { return !backends::cuda_unavailable().has_value(); }

// Two experts (200 and 100 rows in 128-row blocks, so the second tile of expert 0 is partial), K = 224 (three full
// 64-deep stages and a half one, whose codes past K the TMA fills with zeros), N = 320 (a second N tile of 64 rows),
// a third tile whose expert id is out of range (it must store nothing), f32 output.
void check_fp4_gemm(QuantFormat format) {
    const bool nv = format == QuantFormat::kNvfp4;
    constexpr int64_t E = 2, K = 224, N = 320, P = 512;
    const int64_t group = nv ? 16 : 32, KG = K / group;
    const std::vector<int32_t> counts = {200, 100}, starts = {0, 256, 384};
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    Tensor a(DType::kBF16, {P, K}), b(DType::kU8, {E, N, K / 2}), bs(DType::kU8, {E, N, KG}), g(DType::kF32, {E});
    auto* ap = static_cast<uint16_t*>(a.data());
    for (int64_t i = 0; i < P * K; ++i) ap[i] = f32_to_bf16(normal(rng));
    auto* bp = static_cast<uint8_t*>(b.data());
    for (int64_t i = 0; i < E * N * K / 2; ++i) bp[i] = uint8_t(rng());
    auto* sp = static_cast<uint8_t*>(bs.data());
    // mxfp4: 2^-4 .. 2^4; nvfp4: positive normal e4m3 codes 0.25 .. 3.5 and a global scale per expert.
    for (int64_t i = 0; i < E * N * KG; ++i) sp[i] = nv ? uint8_t(0x28 + rng() % 0x20) : uint8_t(123 + rng() % 9);
    static_cast<float*>(g.data())[0] = 0.5f, static_cast<float*>(g.data())[1] = 3.0f;
    const auto weight = [&](int64_t e, int64_t n, int64_t k) {
        const uint8_t byte = bp[(e * N + n) * (K / 2) + k / 2];
        const double code = fp4e2m1_to_f32(uint8_t(k % 2 == 0 ? byte & 15 : byte >> 4));
        const uint8_t s = sp[(e * N + n) * KG + k / group];
        return nv ? code * fp8e4m3_to_f32(s) * static_cast<const float*>(g.data())[e] : code * ue8m0_to_f32(s);
    };

    const GemmRouting routing({0, 0, 1, 7}, starts, counts);
    auto up = [](const Tensor& t) { return DeviceTensor::from_host(t.view(), Device::kCUDA); };
    const DeviceTensor da = up(a), db = up(b), dbs = up(bs), dg = up(g);
    const DeviceTensor dd = poisoned_f32(P, N);
    cuda::GroupedGemmArgs args = routing.store_f32_args(da.view().data, db.view().data, dd.view().data, P, N, K);
    args.b_dtype = DType::kU8;
    args.b_scales = {.format = format,
                     .data = dbs.view().data,
                     .dtype = nv ? DType::kFP8E4M3 : DType::kUE8M0,
                     .row_shift = 0,
                     .col_shift = nv ? 4 : 5,
                     .rows_b = int32_t(N),
                     .cols_b = int32_t(KG),
                     .global = nv ? static_cast<const float*>(dg.view().data) : nullptr};
    const char* why = cuda::sm90_refusal(args);
    if (why != nullptr && std::string(why) == "the device is not an sm_90 (Hopper) GPU") GTEST_SKIP() << why;
    ASSERT_EQ(why, nullptr) << why;
    ASSERT_TRUE(cuda::launch_grouped_gemm_sm90(args, nullptr));
    device_synchronize(Device::kCUDA);
    Tensor d(DType::kF32, {P, N});
    dd.copy_to_host(d.view());
    const auto* dp = static_cast<const float*>(d.data());
    std::vector<double> ref(size_t(P * N), 0.0);
    std::vector<char> real_rows(size_t(P), 0);
    for (int64_t e = 0; e < E; ++e)
        for (int64_t r = starts[e]; r < starts[e] + counts[e]; ++r) {
            real_rows[size_t(r)] = 1;
            for (int64_t n = 0; n < N; ++n) {
                double acc = 0;
                for (int64_t k = 0; k < K; ++k) acc += double(bf16_to_f32(ap[r * K + k])) * weight(e, n, k);
                ref[size_t(r * N + n)] = acc;
            }
        }
    // bf16 x (code * fold) products are exact in f32; what is left is f32 accumulation.
    EXPECT_TRUE(outputs_close(d.view(), ref, real_rows, Tolerance{1e-4, 1e-4})) << quant_format_name(format);
    for (int64_t r = 384; r < P; ++r)  // the tile of expert 7 (out of range): nothing stored
        EXPECT_TRUE(std::isnan(dp[r * N])) << "row " << r;
}

TEST(QuantGemmCuda, Fp4Sm90MatchesFloat64OnTheSameCodes) {
    if (!cuda_here()) GTEST_SKIP() << "no CUDA device";
    check_fp4_gemm(QuantFormat::kMxfp4);
    check_fp4_gemm(QuantFormat::kNvfp4);
}
#endif

}  // namespace
}  // namespace moex::test
