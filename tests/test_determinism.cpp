// Bitwise determinism: every backend gives identical bytes across repeated runs and, on the CPU, for any number of
// threads (1, 2, 3, and the default), since no reduction order may depend on scheduling.
#include "moex/error.h"
#include "tests/test_support.h"

namespace moex::test {
namespace {

class Determinism : public ::testing::TestWithParam<BackendOnDevice> {};

TEST_P(Determinism, IdenticalBytesForAnyThreadCountAndRerun) {
    const Backend& backend = ExpertsInterface::global().get(GetParam().backend);
    const Device device = GetParam().device;
    // T = 129 crosses any power-of-two tile of tokens; odd H and I cross the vector tails; duplicate ids and a
    // sentinel per token exercise the combine. One problem per dtype, two layouts.
    struct Setup {
        DType dtype;
        bool transposed, concatenated, bias;
        int64_t H, I;
    };
    const Setup setups[] = {{DType::kF32, false, true, false, 64, 40},
                            {DType::kBF16, true, false, true, 37, 25},
                            {DType::kF16, false, true, true, 37, 25}};
    std::string refused;
    int ran = 0;
    for (const Setup& s : setups) {
        Variant v;
        v.dtype = s.dtype, v.transposed = s.transposed, v.concatenated = s.concatenated, v.bias = s.bias;
        HostProblem hp(129, s.H, s.I, 12, 4, v, 11);
        for (int64_t t = 0; t < 129; t += 3) hp.set_id(t, 1, hp.id(t, 0));
        for (int64_t t = 1; t < 129; t += 5) hp.set_id(t, 3, 12);
        const PlacedProblem placed = place(hp.problem(), device);
        if (auto why = refusal(backend, placed)) {
            refused += *why + "; ";
            continue;
        }
        ++ran;
        const Tensor first = run_backend(backend, placed);
        const std::string what = v.name();
        EXPECT_TRUE(bitwise_equal(first, run_backend(backend, placed))) << what << ": rerun differs";
        if (device == Device::kCPU) {
            for (int threads : {1, 2, 3, 0}) {
                RunOptions opt;
                opt.num_threads = threads;
                EXPECT_TRUE(bitwise_equal(first, run_backend(backend, placed, opt)))
                    << what << ": num_threads=" << threads << " differs from the default";
            }
        }
        EXPECT_TRUE(outputs_close(first.view(), reference_of(hp.problem()))) << what;
    }
    if (ran == 0) GTEST_SKIP() << refused;
}

INSTANTIATE_TEST_SUITE_P(All, Determinism, ::testing::ValuesIn(backends_on_devices()),
                         [](const auto& info) { return param_name(info.param); });

}  // namespace
}  // namespace moex::test
