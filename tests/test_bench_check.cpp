// `moex bench`'s backend-vs-backend cross-check (bench/output_check.h): one or two bf16 steps pass, a rounding tail
// of at most 1e-6 of the values within 5e-2·rms passes, four steps, a wrong row, a wide
// error or a tail in a small output fail.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "bench/output_check.h"
#include "moex/dtype.h"

namespace moex::bench {
namespace {

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// n bf16 values with rms ~1 (a fixed, deterministic pattern; no two neighbours alike).
std::vector<float> outputs(size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = round_bf16(float(std::sin(0.37 * double(i)) * 1.4));
    return v;
}

// The index of the value of largest magnitude.
size_t largest(const std::vector<float>& v) {
    size_t big = 0;
    for (size_t i = 0; i < v.size(); ++i)
        if (std::fabs(v[i]) > std::fabs(v[big])) big = i;
    return big;
}

// x moved by s bf16 steps away from zero.
float steps_up(float x, int s) {
    uint16_t b = f32_to_bf16(x);
    return bf16_to_f32(uint16_t(b + s));
}

TEST(BenchCrossCheck, OneOrTwoOutputStepsPass) {
    const std::vector<float> ref = outputs(4096);
    std::vector<float> got = ref;
    for (size_t i = 0; i < got.size(); i += 2) got[i] = steps_up(got[i], 1);
    for (size_t i = 1; i < got.size(); i += 7) got[i] = steps_up(got[i], 2);  // large values included
    const CrossCheck c = cross_check(ref, got, DType::kBF16, "batched_mm");
    EXPECT_TRUE(c.ok) << c.text;
    EXPECT_EQ(c.bad, 0);
}

TEST(BenchCrossCheck, FourStepsAtALargeValueFail) {
    const std::vector<float> ref = outputs(4096);
    std::vector<float> got = ref;
    const size_t big = largest(ref);
    got[big] = steps_up(got[big], 4);  // 4 steps near 1.4: 3.1e-2 > 1e-2·rms + 2 steps = 2.6e-2
    const CrossCheck c = cross_check(ref, got, DType::kBF16, "batched_mm");
    EXPECT_FALSE(c.ok) << c.text;
    EXPECT_EQ(c.bad, 1);
    EXPECT_NE(c.text.find("MISMATCH vs batched_mm"), std::string::npos) << c.text;
}

TEST(BenchCrossCheck, ARoundingTailPassesOnlyWhereItIsRareAndSmall) {
    const size_t n = 2'000'000;  // tail budget: 2 values
    const std::vector<float> ref = outputs(n);
    std::vector<float> got = ref;
    got[10] += 0.03f, got[999'999] -= 0.03f;  // cancellation outliers: 3e-2·rms
    CrossCheck c = cross_check(ref, got, DType::kBF16, "batched_mm");
    EXPECT_TRUE(c.ok) << c.text;
    EXPECT_EQ(c.bad, 2);
    EXPECT_NE(c.text.find("2 rounding outliers"), std::string::npos) << c.text;

    // Two steps at the largest value (within the bound, but more than 5e-2·rms): still passes.
    const size_t big = largest(ref);
    std::vector<float> big_ref = ref;
    big_ref[big] = 6.0f, got[big] = steps_up(6.0f, 2);  // 2 steps at 6: 6.25e-2 (rms stays ~1)
    c = cross_check(big_ref, got, DType::kBF16, "batched_mm");
    EXPECT_TRUE(c.ok) << c.text;
    EXPECT_EQ(c.bad, 2);
    EXPECT_GT(c.max_rel, 5e-2);
    got[big] = ref[big];

    got[1'500'000] += 0.03f;  // a third: past the budget
    c = cross_check(ref, got, DType::kBF16, "batched_mm");
    EXPECT_FALSE(c.ok) << c.text;

    got = ref;
    got[10] += 0.08f;  // one, but past 5e-2·rms
    c = cross_check(ref, got, DType::kBF16, "batched_mm");
    EXPECT_FALSE(c.ok) << c.text;

    const std::vector<float> small_ref = outputs(8192);  // below 10^6 values: no tail at all
    std::vector<float> small = small_ref;
    small[10] += 0.03f;
    c = cross_check(small_ref, small, DType::kBF16, "batched_mm");
    EXPECT_FALSE(c.ok) << c.text;
}

TEST(BenchCrossCheck, AWrongRowFails) {
    const size_t n = 2'000'000, H = 2048;
    const std::vector<float> ref = outputs(n);
    std::vector<float> got = ref;
    for (size_t i = 0; i < H; ++i) got[5 * H + i] = ref[7 * H + i];  // another token's row
    const CrossCheck c = cross_check(ref, got, DType::kBF16, "batched_mm");
    EXPECT_FALSE(c.ok) << c.text;
    EXPECT_GT(c.bad, 1000);
}

TEST(BenchCrossCheck, NaNAndSizeMismatchFail) {
    const std::vector<float> ref = outputs(4096);
    std::vector<float> got = ref;
    got[3] = NAN;
    EXPECT_FALSE(cross_check(ref, got, DType::kBF16, "eager").ok);
    got.pop_back();
    EXPECT_FALSE(cross_check(ref, got, DType::kBF16, "eager").ok);
}

TEST(BenchCrossCheck, F16AndF32UseTheirOwnSteps) {
    const std::vector<float> ref = outputs(4096);
    std::vector<float> got = ref;
    got[100] = ref[100] * (1 + 0x1p-10f);  // one f16 step near the bottom of a binade at most: passes in f16
    EXPECT_TRUE(cross_check(ref, got, DType::kF16, "eager").ok);
    got[100] = ref[100] * (1 + 5e-5f) + 0.02f;  // 2e-2·rms: fails in f32 and f16
    EXPECT_FALSE(cross_check(ref, got, DType::kF32, "eager").ok);
    EXPECT_FALSE(cross_check(ref, got, DType::kF16, "eager").ok);
}

}  // namespace
}  // namespace moex::bench
