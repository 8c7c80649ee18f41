// grouped_mm's packed rows (experts back to back, an expert's last tile running on into the next one's rows) against
// the padded layout deepgemm keeps (MOEX_PACKED_ROWS=0): the same GEMM arithmetic per row, so the same bits, for
// every layout and 16-bit dtype on the sm_90a kernel, f32 on the portable one, with sentinel slots (rows of no expert
// after the last expert's) and an expert left unhit; both against the float64 reference too.
#include <gtest/gtest.h>

#include <string>

#include "moex/backend.h"
#include "tests/backward_reference.h"
#include "tests/test_support.h"

namespace moex::test {
namespace {

bool cuda_here() { return !ExpertsInterface::global().get("grouped_mm").unavailable(Device::kCUDA).has_value(); }

class GroupedLayoutCuda : public ::testing::TestWithParam<DType> {};

TEST_P(GroupedLayoutCuda, PackedRowsAreThePaddedLayoutBitForBit) {
    if (!cuda_here()) GTEST_SKIP() << "no CUDA device";
    const Backend& b = ExpertsInterface::global().get("grouped_mm");
    uint64_t seed = 700;
    // T = 45: a partial tile per expert; T = 300, k = 2 over E = 3: each expert ~200 rows, a full tile and a partial
    // one that runs into the next expert; H, I off the 128 grid where the dtype allows.
    for (const Variant& v : all_layouts(GetParam()))
        for (const int64_t T : {1, 45, 300}) {
            const int64_t E = 3, k = 2, H = 136, I = 72;
            HostProblem hp(T, H, I, E, k, v, ++seed);
            add_sentinels(hp, T, k, E, /*unhit=*/E - 1);  // T = 1: both slots sentinels, no row of any expert
            const PlacedProblem placed = place(hp.problem(), Device::kCUDA);
            const Tensor packed = run_backend(b, placed);
            const Tensor padded = with_env("MOEX_PACKED_ROWS", "0", [&] { return run_backend(b, placed); });
            const std::string what = v.name() + " T=" + std::to_string(T);
            EXPECT_TRUE(bitwise_equal(packed, padded)) << what;
            EXPECT_TRUE(outputs_close(packed.view(), reference_of(hp.problem()))) << what;
            if (::testing::Test::HasFailure()) return;
        }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GroupedLayoutCuda, ::testing::Values(DType::kBF16, DType::kF16, DType::kF32),
                         [](const ::testing::TestParamInfo<DType>& info) {
                             return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace moex::test
